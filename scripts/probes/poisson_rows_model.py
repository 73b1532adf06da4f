"""A model of issue 41's five-minute Poisson check, to see which of its figures a machine's speed can move.

Continuous batching with `--rows` rows: each loop iteration makes one token for every active row and takes
T(n) = speed x (GPT step at n rows + the rows' chunk decodes) ms, n the active rows, plus a newcomer's prefill and
its first chunk's lone decode in the iteration that has them (every row waits for both). Requests arrive Poisson at
`--rate` a second for `--duration` s, each 256 tokens (5.45 s of audio), first audio after FIRST_AT tokens; a row
frees when its last token is made. `speed` scales every cost: 1 is the trace below, 1.1 a machine 10 % slower.

It prints, per speed: how many times real time `--rows` rows stream, the share of the floor that holding that many
streams would be (capacity / what the rows make together), p90 first audio (median over `--seeds` arrival
sequences, and their p10-p90) against a lone listener's, and the share of continuous streams.

    python scripts/probes/poisson_rows_model.py [--rows 8] [--rate 1.17] [--speeds 0.6,0.8,1,1.1,1.2] [--seeds 30]

The costs are medians from one loop trace (CHATTTS_LAB_LOOP_TRACE) of the Poisson run: lab int4, full-size
synthetic weights, 2 threads, the Zen 4 VM (AVX-512 VNNI), 2026-12-06 (docs/measurements/2026-12-06-first-audio-floor.md).
A model, not a measurement: it leaves out the HTTP and encoding threads and the chunks' own pacing (chunk_due).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
from bench.serving.listening import CONTINUITY_LIMIT_S  # noqa: E402
from chattts_lab.engines.lab.stream import HOLD  # noqa: E402
from chattts_lab.metrics import SAMPLE_RATE, SAMPLES_PER_TOKEN  # noqa: E402
from chattts_lab.serve.streaming import FIRST_AT, MIN_CHUNK  # noqa: E402

TOKEN_MS = 1000 * SAMPLES_PER_TOKEN / SAMPLE_RATE  # audio a token makes
TOKENS = 256
STEP_MS = {1: 5.4, 2: 5.5, 3: 6.4, 4: 7.2, 5: 8.4, 6: 9.4, 7: 10.8, 8: 11.8}  # GPT step by active rows
DECODE_MS_PER_ROW_TOKEN = 0.74  # the run's decode time over its rows' tokens
PREFILL_MS, FIRST_DECODE_MS = 25.0, 21.0  # a newcomer's prompt; a first chunk decoded alone


def iteration_ms(rows: int) -> float:
    """One token for each of `rows` rows at speed 1; beyond 8 rows the step grows by its 4-8-row slope."""
    step = STEP_MS.get(rows) or STEP_MS[8] + (rows - 8) * (STEP_MS[8] - STEP_MS[4]) / 4
    return step + DECODE_MS_PER_ROW_TOKEN * rows


def lone_first_audio_s(speed: float) -> float:
    return speed * (PREFILL_MS + FIRST_AT * iteration_ms(1) + FIRST_DECODE_MS) / 1000


def token_times(max_rows: int, arrivals_ms: list[float], speed: float) -> list[tuple[float, np.ndarray]]:
    """Each request's arrival and the times its tokens were made, FIFO for a free row."""
    waiting, active, finished = [], [], []
    now, next_arrival = 0.0, 0
    while next_arrival < len(arrivals_ms) or waiting or active:
        if not active and not waiting:
            now = max(now, arrivals_ms[next_arrival])
        while next_arrival < len(arrivals_ms) and arrivals_ms[next_arrival] <= now:
            waiting.append(arrivals_ms[next_arrival])
            next_arrival += 1
        cost = 0.0
        while waiting and len(active) < max_rows:
            active.append((waiting.pop(0), []))
            cost += PREFILL_MS
        cost += iteration_ms(len(active)) + FIRST_DECODE_MS * sum(len(t) == FIRST_AT - 1 for _, t in active)
        now += speed * cost
        for _, times in active:
            times.append(now)
        finished += [(a, np.array(t)) for a, t in active if len(t) == TOKENS]
        active = [(a, t) for a, t in active if len(t) < TOKENS]
    return finished


def listened(arrived: float, times: np.ndarray) -> tuple[float, bool]:
    """First audio (s) and whether the stream was continuous: the first chunk holds FIRST_AT - HOLD tokens, token k is
    heard at first audio + k tokens of audio and is there once its chunk (MIN_CHUNK tokens) and HOLD more are made."""
    first = times[FIRST_AT - 1]
    sent = FIRST_AT - HOLD
    k = np.arange(sent, TOKENS)
    ready = np.minimum(TOKENS, sent + ((k - sent) // MIN_CHUNK + 1) * MIN_CHUNK + HOLD)
    late_ms = times[ready - 1] - (first + k * TOKEN_MS)
    return (first - arrived) / 1000, late_ms.max() <= CONTINUITY_LIMIT_S * 1000


def one_run(rows: int, rate: float, duration_s: float, speed: float, seed: int) -> tuple[float, float]:
    """p90 first audio (s) and % of continuous streams for one arrival sequence."""
    gaps = np.random.default_rng(seed).exponential(1000 / rate, int(rate * duration_s * 2) + 10)
    arrivals = np.cumsum(gaps)
    heard = [listened(a, t) for a, t in token_times(rows, list(arrivals[arrivals < duration_s * 1000]), speed)]
    return float(np.percentile([f for f, _ in heard], 90)), 100 * float(np.mean([c for _, c in heard]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--rate", type=float, default=1.17, help="requests a second (1.17: 80 %% of 8 streams)")
    parser.add_argument("--duration", type=float, default=300)
    parser.add_argument("--speeds", default="0.6,0.7,0.8,0.9,1,1.05,1.1,1.2,1.3")
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    print(f"| machine time x | {args.rows} rows, x real time | share of the floor if {args.rows} held | p90 first "
          "audio s (p10-p90 of the seeds) | x lone | continuous % |\n|---|---|---|---|---|---|")
    for speed in map(float, args.speeds.split(",")):
        real_time_x = TOKEN_MS / (speed * iteration_ms(args.rows))
        runs = [one_run(args.rows, args.rate, args.duration, speed, seed) for seed in range(args.seeds)]
        p90 = np.median([p for p, _ in runs])
        low, high = np.percentile([p for p, _ in runs], [10, 90])
        print(f"| {speed:.2f} | {real_time_x:.2f} | {min(1.0, 1 / real_time_x):.2f} | {p90:.2f} ({low:.2f}-{high:.2f}) "
              f"| {p90 / lone_first_audio_s(speed):.1f} | {np.median([c for _, c in runs]):.1f} |")


if __name__ == "__main__":
    main()
