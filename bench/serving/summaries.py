"""What a serving benchmark's levels came to (bench.serving.loadtest measures them): each level's row of
counts and percentiles, the history's serving runs as a table, and the sentence that compares batching with none.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from chattts_lab.requests import REQUEST_LEVEL

NOTE = "serving"  # the sweep note a serving run is kept under: its levels and every request
LEVEL_METRICS = ("queue_s", "ttfb_s", "ttfa_s", "latency_s", "stall_total_s", "stall_worst_s")


def summarize_level(level: dict, records: list[dict]) -> dict:
    """A level's row: counts, percentiles of queue wait, first audio and latency, and audio made per second."""
    ok = [r for r in records if r["status"] == "ok"]
    ends = [r["submitted_s"] + r["latency_s"] for r in ok]
    wall = max(ends) - min(r["submitted_s"] for r in records) if ok else None
    row = {**level, "users": level.get("users"), "rate": level.get("rate"),  # both keys in every row, for tables
           "requests": len(records),
           "ok": len(ok), "errors": sum(r["status"] == "error" for r in records),
           "lost": sum(r["status"] == "lost" for r in records), "wall_s": wall,
           "audio_s": sum(r["audio_s"] for r in ok),
           "batch_sizes": dict(sorted(Counter(r["batch_requests"] for r in ok if r["batch_requests"]).items())),
           "config": ", ".join(sorted({r["config"] for r in ok if r["config"]})) or None,
           "scheduling": ", ".join(sorted({r.get("scheduling") for r in ok if r.get("scheduling")})) or None,
           "continuity_pct": continuity_pct(records),
           "errors_seen": sorted({r["error"] for r in records if r["error"]})[:5]}
    row["audio_s_per_s"] = row["audio_s"] / wall if wall else None
    for metric in LEVEL_METRICS:
        values = [r[metric] for r in ok if r[metric] is not None]
        for q in (50, 90, 99):
            row[f"{metric.removesuffix('_s')}_p{q}_s"] = float(np.percentile(values, q)) if values else None
    return row


def continuity_pct(records: list[dict]) -> float | None:
    """Of the streamed requests, the percentage a listener heard without a stall over 100 ms; a stream that
    failed or was lost counts as broken (None when the level streamed nothing)."""
    streamed = [r for r in records if r["stream"]]
    if not streamed:
        return None
    return 100 * sum(r["status"] == "ok" and bool(r.get("continuous")) for r in streamed) / len(streamed)


def serving_frame(db_path, sweep_ids: list[int] | None = None):
    """One row per load level of the given serving runs (all when None), with the machine that ran it."""
    import pandas as pd

    from chattts_lab.history.store import Store

    rows = []
    with Store(db_path) as store:
        for sweep in store.sweeps_list():
            if sweep["spec"].get("kind") != "serve" or (sweep_ids is not None and sweep["id"] not in sweep_ids):
                continue
            for level in (store.notes(sweep["id"]).get(NOTE) or {}).get("levels", []):
                rows.append({"sweep_id": sweep["id"], "machine": sweep["machine"], **level})
    return pd.DataFrame(rows)


def batching_gain(summaries: list[dict], users: int) -> str | None:
    """The sentence the serving benchmark answers: batched against one at a time, at this many users."""
    summaries = [s for s in summaries if s.get("batching", REQUEST_LEVEL) == REQUEST_LEVEL]
    at = {s["max_batch"]: s for s in summaries if s.get("users") == users and s["ok"]}
    if len(at) < 2 or 1 not in at:
        return None
    one, best = at[1], at[max(at)]
    if not (one["audio_s_per_s"] and best["audio_s_per_s"] and one["latency_p90_s"] and best["latency_p90_s"]):
        return None
    sentence = (f"{users} user{'s' * (users != 1)} at once, batches of up to {max(at)} against one at a time: "
                f"{best['audio_s_per_s'] / one['audio_s_per_s']:.2f}x the audio per second "
                f"({best['audio_s_per_s']:.2f} vs {one['audio_s_per_s']:.2f} audio s/s), p90 latency "
                f"{best['latency_p90_s'] / one['latency_p90_s']:.2f}x ({best['latency_p90_s']:.2f} s vs "
                f"{one['latency_p90_s']:.2f} s), time to first audio p90 {best['ttfa_p90_s']:.2f} s vs "
                f"{one['ttfa_p90_s']:.2f} s.")
    alone = [s for s in summaries if s.get("users") == 1 and s["max_batch"] == max(at) and s["ok"] and s["ttfa_p50_s"]]
    if alone and users > 1 and best["ttfa_p99_s"]:
        sentence += (f" The slowest first audio of the {users} users ({best['ttfa_p99_s']:.2f} s, p99) is "
                     f"{best['ttfa_p99_s'] / alone[0]['ttfa_p50_s']:.1f}x a single user's.")
    return sentence
