"""The soak (opt-in: `-m slow`; 30 minutes and more on 2 cores): mixed arrivals at 70 % of the capacity this machine
measures first, against the real app through the serving benchmark's own load generator
(bench.serving.loadtest). Every request must be answered whole (its audio exactly as long as asked) or refused
with a reason (a 503 `overloaded`), none lost, and the app's memory must grow less than 5 % over the soak's second
half (a leak grows steadily; buffers that reach their size do not).

Environment: CHATTTS_LAB_SOAK_S (seconds of arrivals, default 1800), CHATTTS_LAB_SOAK_MODEL (default `synthetic`,
full-size random weights), CHATTTS_LAB_SOAK_ENGINE / _PRECISION (default lab int8), CHATTTS_LAB_SOAK_BATCHING
(default continuous). A quick check of the test itself: CHATTTS_LAB_SOAK_S=20 CHATTTS_LAB_SOAK_MODEL=synthetic-tiny.
Run with `-rP` to see the figures.
"""

from __future__ import annotations

import os

import pytest

from chattts_lab.metrics import SAMPLE_RATE, samples_for_tokens
from bench.serving.loadtest import LevelFinished, ServeFinished, run_serving
from bench.serving.spec import ServeSpec
from bench.serving.summaries import NOTE

SOAK_S = float(os.environ.get("CHATTTS_LAB_SOAK_S", 1800))
LOAD = 0.7  # of the measured capacity
TOKENS = 96
ROWS = 8


def soak_spec(**levels) -> ServeSpec:
    env = os.environ.get
    return ServeSpec(model=env("CHATTTS_LAB_SOAK_MODEL", "synthetic"), engine=env("CHATTTS_LAB_SOAK_ENGINE", "lab"),
                     precision=env("CHATTTS_LAB_SOAK_PRECISION", "int8"),
                     batching=(env("CHATTTS_LAB_SOAK_BATCHING", "continuous"),), max_batches=(ROWS,), max_rows=ROWS,
                     tokens=TOKENS, mixed=True, **levels)


def run(spec: ServeSpec, db) -> tuple[list[dict], list[dict]]:
    """The run's level summaries and every request's record, as the history keeps them."""
    from chattts_lab.history.store import Store

    events = list(run_serving(spec, db))
    (finished,) = [e for e in events if isinstance(e, ServeFinished)]
    assert finished.status == "finished", finished
    with Store(db) as store:
        note = store.notes(finished.sweep_id)[NOTE]
    return [e.summary for e in events if isinstance(e, LevelFinished)], note["requests"]


def whole_or_refused(record: dict) -> str | None:
    """Why a request's answer is neither whole nor a refusal with a reason (None when it is one of them)."""
    if record["status"] == "ok":
        asked = samples_for_tokens(record["tokens"]) / SAMPLE_RATE
        return None if abs(record["audio_s"] - asked) < 0.5 / SAMPLE_RATE else \
            f"{record['audio_s']:.4f} s of audio where {asked:.4f} s were asked ({record})"
    if record["status"] == "error" and "HTTP 503" in record["error"] and "overloaded" in record["error"]:
        return None
    return f"{record['status']}: {record['error']}"


@pytest.mark.slow
@pytest.mark.timeout(SOAK_S + 1800)  # pytest.ini's 600 s would end it: the capacity search and the soak itself
def test_a_soak_at_seventy_percent_of_capacity_answers_every_request_whole_or_refuses_it(tmp_path):
    db = tmp_path / "soak.sqlite"
    # capacity: requests a second the app completes with every row busy (closed loop, 2 requests per row's user)
    (saturated,), _ = run(soak_spec(users=(ROWS,), requests_per_user=2), db)
    assert saturated["ok"] == saturated["requests"], saturated["errors_seen"]
    clip_s = samples_for_tokens(TOKENS) / SAMPLE_RATE
    # mixed requests are on average 5/6 of a clip long (every third one is half as long)
    capacity = saturated["audio_s_per_s"] / (clip_s * 5 / 6)
    rate = round(LOAD * capacity, 3)
    (level,), records = run(soak_spec(users=(), rates=(rate,), duration_s=SOAK_S), db)
    problems = [p for p in map(whole_or_refused, records) if p]
    print(f"soak: capacity {capacity:.2f} requests/s, arrivals {rate} requests/s for {SOAK_S:.0f} s: "
          f"{level['requests']} requests, {level['ok']} whole, {level['errors']} refused, {level['lost']} lost; RSS "
          f"{level['rss_start_mb']:.0f} -> {level['rss_mid_mb']:.0f} -> {level['rss_end_mb']:.0f} MB "
          f"(second half {level['rss_late_growth_pct']:+.1f} %); p99 first audio {level['ttfa_p99_s']}")
    assert records and not problems, f"{len(problems)} of {len(records)}: {problems[:3]}"
    assert level["rss_late_growth_pct"] < 5, level
