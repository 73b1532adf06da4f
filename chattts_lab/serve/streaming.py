"""When a streamed row of continuous batching sends its next chunk (chattts_lab.serve.scheduler asks `chunk_due` for
each row after every GPT step): paced by its listener's buffer, not by a fixed schedule."""

from __future__ import annotations

import statistics
import time
from collections import deque

from chattts_lab.metrics import SAMPLE_RATE, SAMPLES_PER_TOKEN, samples_for_tokens

FIRST_AT = 24  # tokens before a row's first audio (0.5 s of audio: twice the lab's own stream.FIRST_CHUNK)
MIN_CHUNK = 12  # tokens: each chunk decodes 14 more and costs a call; at 8, three listeners stalled more
MAX_CHUNK = 48  # tokens a stream well ahead of its listener sends at a time
JOIN_AT = MIN_CHUNK // 2  # tokens a row must have waiting to join a call made for another row's chunk (joins_call)
LOW_WATER_LOOPS, LOW_WATER_MIN_S = 2.5, 0.12  # a stream whose listener is this close to running dry sends now
PACE_LOOPS = 64  # the latest loop iterations LoopPace weighs: more than a full chunk's, so its mean holds a decode


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


def joins_call(generated: int, sent: int, ahead_s: float | None, hold: int) -> bool:
    """Whether a streamed row that is not due itself sends what it has in a decode call that another row's due
    chunk makes anyway: once it streams (its first chunk sent) and JOIN_AT tokens wait.

    Why: a call costs about 15 ms before its first token, and rows that joined the loop at different steps fall due at
    different steps, so each paid it alone: with 8 listeners over HTTP, 110 of 156 calls held one row's 12 tokens
    (18 ms each, 1.5 ms a token) against 0.6 ms a token a row when 8 rows' chunks decode together
    (docs/measurements/2026-12-04-capacity-trace.md). A row that joins a call is sent audio early (its listener's
    buffer only grows), and from then on the rows fall due together. Half a small chunk is enough: in a shared call
    every row is decoded at the widest span's width anyway, and with a full MIN_CHUNK asked a row a few tokens out of
    step was left out and fell due alone a few steps later, every time (seen: seven rows together, then the eighth
    alone, for a whole request); a row out of step by fewer than JOIN_AT tokens joins the others when it falls due
    itself, as they then have JOIN_AT waiting. Fewer would add a row's whole width to a call for a token or two."""
    return ahead_s is not None and generated - hold - sent >= JOIN_AT


def due_spans(rows: list, active: list, low_water_s: float | None, hold: int) -> tuple[list[tuple], int]:
    """The chunks to decode now, as (row, first sample, end sample): each streamed row of `rows` whose chunk is due
    (chunk_due, or all it has left at its end), then each other active row that joins their call (joins_call); and
    how many joined. Rows are the engine's RowDecoder rows, their `meta` holding "sent" (samples).

    No row joins a call that holds a first chunk: a newcomer's first audio waits for that call, which took 55 ms
    (median) with the others in it against 20 ms alone (lab int8, 2 cores, a capacity run's trace); the others wait
    for their own next call, where the newcomer then joins them."""
    spans = [span for span in (_span(row, hold, low_water_s) for row in rows) if span]
    if not spans or first_chunks(spans):  # a first chunk goes out alone: it is a first audio
        return spans, 0
    due = {id(row) for row, _, _ in spans}
    joining = [span for span in (_span(row, hold, low_water_s, joining=True) for row in active
                                 if id(row) not in due and row.ended is None) if span]
    return spans + joining, len(joining)


def first_chunks(spans: list[tuple]) -> int:
    """How many of the (row, first sample, end sample) spans are their row's first chunk (its first audio)."""
    return sum(1 for _, first, _ in spans if first == 0)


def _span(row, hold: int, low_water_s: float | None, joining: bool = False) -> tuple | None:
    if not row.owner.stream:
        return None
    n, sent = row.generated, row.meta.setdefault("sent", 0)
    tokens_sent, ahead = sent // SAMPLES_PER_TOKEN, ahead_s(row.meta)
    if joining:
        if not joins_call(n, tokens_sent, ahead, hold):
            return None
    elif not (row.ended or chunk_due(n, tokens_sent, ahead, low_water_s, hold)):
        return None
    upto = samples_for_tokens(n) if row.ended else SAMPLES_PER_TOKEN * max(0, n - hold)
    return (row, sent, upto) if upto > sent else None


class LoopPace:
    """The continuous-batching loop's latest iterations (admissions, a step and the chunks it decoded), for
    `low_water_s`."""

    def __init__(self, keep: int = PACE_LOOPS):
        self._loops: deque[float] = deque(maxlen=keep)
        self._steady: deque[float] = deque(maxlen=keep)  # those that admitted no one: a step and shared decodes

    def took(self, seconds: float, admitting: bool = False) -> None:
        """One loop iteration took this long; `admitting`: it worked for a newcomer (a prefill or slice of its
        prompt, its first chunk)."""
        self._loops.append(seconds)
        if not admitting:
            self._steady.append(seconds)

    def low_water_s(self) -> float | None:
        """How little audio ahead makes a listener's row send what it has (chunk_due): LOW_WATER_LOOPS of the
        loop's slowest recent iterations (a newcomer's prefill included: running rows wait for it too). None while
        the loop's steady iterations take longer than a token's audio on average: every listener falls behind
        whatever is sent, and small chunks would slow every row further (eight rows that start together streamed in
        11.9 s with them, against 9.7 s in 48-token chunks).

        The mean, because the chunk decodes fall in some iterations only: five rows stepping in 15 ms with an 80 ms
        decode every tenth have a median of 15 ms and a mean of 23 ms, and only the mean says they fall behind (and
        that small chunks, each paying its context, keep them there: docs/measurements/2026-12-04-capacity-trace.md).
        Of the steady iterations only: a newcomer's slices and first chunk are work it costs once, and with them in
        the mean five listeners joining at once read as "slower than real time" just after their first chunks, whose
        next then waited for a full chunk and came 0.1-0.2 s late."""
        if not self._loops:  # before the first iteration: nothing measured yet
            return LOW_WATER_MIN_S
        if self._steady and statistics.fmean(self._steady) > SAMPLES_PER_TOKEN / SAMPLE_RATE:
            return None
        return max(LOW_WATER_MIN_S, LOW_WATER_LOOPS * max(self._loops))


def ahead_s(meta: dict) -> float | None:
    """Seconds of a row's audio sent (meta["sent"], samples) beyond what a real-time player, started at its first
    chunk (meta["first_sent_at"]), has played; None before its first chunk."""
    started = meta.get("first_sent_at")
    if started is None:
        return None
    return meta["sent"] / SAMPLE_RATE - (time.perf_counter() - started)
