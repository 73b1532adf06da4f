"""A stream as a listener hears it: when its first audio came, and how long a real-time player stalled.

A player starts at the stream's first audio and plays samples at the sample rate. Whenever it has played
everything that has arrived, it waits (a stall) until the next samples come, then plays on from there. The
stall figures come from the arrival timeline alone (when each piece came, how many samples had come by then),
so they are what a listener on that client would have heard, whatever the server says about itself.
A stream is *continuous* when no single stall lasts longer than `CONTINUITY_LIMIT_S` (100 ms: about where a
gap becomes an audible dropout rather than a slightly longer pause).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from chattts_lab.metrics import SAMPLE_RATE

CONTINUITY_LIMIT_S = 0.1


@dataclass(frozen=True)
class Stalls:
    total_s: float  # all waits of the player after it started, together
    worst_s: float  # the longest single wait
    count: int  # waits of any length

    def continuous(self, limit_s: float = CONTINUITY_LIMIT_S) -> bool:
        return self.worst_s <= limit_s


def player_stalls(arrivals: Sequence[tuple[float, int]], sample_rate: int = SAMPLE_RATE) -> Stalls:
    """Stalls of a real-time player fed by `arrivals`: (seconds since the request, samples received by then),
    in order of time, with nondecreasing sample counts. The player starts at the first arrival with samples."""
    arrivals = [(t, n) for t, n in arrivals if n > 0]
    if not arrivals:
        return Stalls(0.0, 0.0, 0)
    origin, buffered = arrivals[0]  # origin: when sample 0 plays, shifted later by every stall so far
    total = worst = 0.0
    count = 0
    for t, received in arrivals[1:]:
        if received < buffered:
            raise ValueError(f"sample counts must not decrease: {received} after {buffered}")
        runs_dry = origin + buffered / sample_rate  # when the player has played all it had
        if t > runs_dry:
            wait = t - runs_dry
            total, worst, count = total + wait, max(worst, wait), count + 1
            origin += wait
        buffered = received
    return Stalls(total, worst, count)
