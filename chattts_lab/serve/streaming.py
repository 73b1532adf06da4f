"""When a streamed row of continuous batching sends its next chunk (chattts_lab.serve.scheduler asks `chunk_due` for
each row after every GPT step): paced by its listener's buffer, not by a fixed schedule."""

from __future__ import annotations

import statistics
import time
from collections import deque

from chattts_lab.metrics import SAMPLE_RATE, SAMPLES_PER_TOKEN

FIRST_AT = 24  # tokens before a row's first audio (0.5 s of audio: twice the lab's own stream.FIRST_CHUNK)
MIN_CHUNK = 12  # tokens: each chunk decodes 14 more and costs a call; at 8, three listeners stalled more
MAX_CHUNK = 48  # tokens a stream well ahead of its listener sends at a time
LOW_WATER_LOOPS, LOW_WATER_MIN_S = 2.5, 0.12  # a stream whose listener is this close to running dry sends now


def chunk_due(generated: int, sent: int, ahead_s: float | None, low_water_s: float | None, hold: int) -> bool:
    """Whether a streamed row sends a chunk now: its first after FIRST_AT tokens, then when MAX_CHUNK tokens wait
    or when its listener is about to run dry (less than `low_water_s` of audio ahead) and MIN_CHUNK tokens wait.

    `generated`: the row's tokens; `sent`: tokens whose audio has been sent; `hold`: the decoder's trailing tokens
    that wait for their right context (RowDecoder.hold); `ahead_s`: audio sent beyond what a
    real-time player that started at the first chunk has played by now (None before the first chunk).
    `low_water_s`: the loop's own (LoopPace.low_water_s), LOW_WATER_LOOPS of its slowest recent
    iterations: the time until this row's next chance to send, with room for its own decode; None while the loop
    falls behind real time, when only full chunks are sent.

    Why by the listener's buffer, not a fixed schedule: a chunk's decode runs in the loop every row waits for
    and costs about 1 ms a token plus a fixed part (stream.LEFT_CONTEXT tokens of context, HOLD of right context,
    the call), so few large chunks cost least, while a listener whose buffer is short needs the next chunk now.
    A fixed schedule (every 24 tokens, then 48) left the 18 tokens (383 ms) of a first chunk to cover the next
    24 tokens' steps and every other row's decodes: with two listeners on 2 cores, stalls up to 185 ms at the
    second chunk (docs/measurements/2026-12-02-engine-thread.md). Once a chunk leaves a listener at the low water,
    the next can be larger by the ratio of real time to the step time, so chunks grow as fast as the load allows."""
    if ahead_s is None:
        return generated >= FIRST_AT
    waiting = generated - hold - sent
    return waiting >= MAX_CHUNK or (low_water_s is not None and ahead_s < low_water_s and waiting >= MIN_CHUNK)


class LoopPace:
    """The continuous-batching loop's latest iterations (admissions, a step and the chunks it decoded), for
    `low_water_s`."""

    def __init__(self, keep: int = 32):
        self._loops: deque[float] = deque(maxlen=keep)

    def took(self, seconds: float) -> None:
        """One loop iteration took this long."""
        self._loops.append(seconds)

    def low_water_s(self) -> float | None:
        """How little audio ahead makes a listener's row send what it has (chunk_due): LOW_WATER_LOOPS of the
        loop's slowest recent iterations (a newcomer's prefill included: running rows wait for it too). None while
        the loop's typical (median) iteration takes longer than a token's audio: every listener falls behind
        whatever is sent, and small chunks would slow every row further (eight rows that start together streamed
        in 11.9 s with them, against 9.7 s in 48-token chunks). The median, not the mean: the iteration that admits
        a burst of newcomers prefills them all, and one such said "slower than real time" for the next 32."""
        if not self._loops:  # before the first iteration: nothing measured yet
            return LOW_WATER_MIN_S
        if statistics.median(self._loops) > SAMPLES_PER_TOKEN / SAMPLE_RATE:
            return None
        return max(LOW_WATER_MIN_S, LOW_WATER_LOOPS * max(self._loops))


def ahead_s(meta: dict) -> float | None:
    """Seconds of a row's audio sent (meta["sent"], samples) beyond what a real-time player, started at its first
    chunk (meta["first_sent_at"]), has played; None before its first chunk."""
    started = meta.get("first_sent_at")
    if started is None:
        return None
    return meta["sent"] / SAMPLE_RATE - (time.perf_counter() - started)
