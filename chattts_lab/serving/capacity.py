"""Capacity: how many real-time streams this machine holds under a service level.

`python -m bench serve --capacity` starts the app once per scheduling (as the serving benchmark does), then
raises the number of closed-loop users (each one a stream: its next request as soon as the last is answered,
the users' starts spread over one clip's length) until the service level breaks: p99 time to first audio at
most `slo_ttfa_p99_s` and at least `slo_continuity_pct` % of the streams heard with no stall over 100 ms, with
every request answered. It doubles the users while the level holds, then halves the gap between the last level
that held and the first that broke. The answer, "this machine holds N real-time streams of this
configuration", is kept with the curve (every level tried) in the run's `serving` note, so the history, bundles
and comparisons across machines carry it like every other result.

Before the search, each app measures its floor in the same run: every row (a full batch, for request-level
batching) started at once, one streamed request each, and the audio seconds they make per second, which is how
many real-time streams this machine makes of this configuration with perfect scheduling. Capacity is reported as
a share of it, with a diagnosis in plain words (`floor_diagnosis`): a capacity far below the floor is lost to
scheduling (first audio, stalls), one near it needs a faster step, and a floor below one stream means the
configuration cannot serve one listener in real time here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from chattts_lab.history.price import MachinePrice, price_from_notes
from chattts_lab.said import Said
from chattts_lab.metrics import SAMPLE_RATE, samples_for_tokens, usd_per_audio_hour
from chattts_lab.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted, _app,
                                          _measured_level, _save)
from chattts_lab.serving.summaries import NOTE, summarize_level

FLOOR_REACHED_PCT = 85  # a capacity at this share of its floor is limited by the machine, not by scheduling


@dataclass
class CapacityFound:
    """One scheduling's answer: `streams` held (0: not even one), and the level that broke it."""

    result: dict


def broken_because(summary: dict, spec: ServeSpec) -> str | None:
    """Why this level misses the service level (None: it holds)."""
    if summary["ok"] < summary["requests"]:
        return Said("{lost} of {requests} requests failed or were lost", lost=summary["requests"] - summary["ok"],
                    requests=summary["requests"])
    ttfa, continuity = summary.get("ttfa_p99_s"), summary.get("continuity_pct")
    if ttfa is None or ttfa > spec.slo_ttfa_p99_s:
        return Said("p99 time to first audio {ttfa} s > {limit:g} s", ttfa=_num(ttfa), limit=spec.slo_ttfa_p99_s)
    if continuity is None or continuity < spec.slo_continuity_pct:
        return Said("continuity {continuity} % < {limit:g} %", continuity=_num(continuity),
                    limit=spec.slo_continuity_pct)
    return None


def next_users(tried: dict[int, bool], max_users: int) -> int | None:
    """The next number of users to try, given which held (True) and which broke: double while all held, then
    bisect between the largest that held and the smallest that broke. None: the answer is known."""
    held = [n for n, ok in tried.items() if ok]
    broke = [n for n, ok in tried.items() if not ok]
    low, high = max(held, default=0), min(broke, default=None)
    if high is None:
        return None if low >= max_users else min(max_users, max(1, 2 * low))
    return None if high - low <= 1 else (low + high) // 2


def run_capacity(spec: ServeSpec, db_path, should_stop: Callable[[], bool] = lambda: False) -> Iterator:
    """The capacity search for every scheduling of the spec, stored as it goes; yields the serving events plus
    one CapacityFound per scheduling."""
    spec = spec.validate()
    from chattts_lab.trackers.env import capture_environment
    from chattts_lab.history.store import Store

    ramp = spec.ramp_s or samples_for_tokens(spec.tokens) / SAMPLE_RATE  # one clip: users arrive spread out
    spec = replace(spec, ramp_s=ramp)
    with Store(db_path) as store:
        sweep_id = store.create_sweep(spec.as_dict(), capture_environment())
    apps = spec.apps()
    yield ServeStarted(sweep_id, 0)  # how many levels is what the search finds out
    summaries, requests, found, status = [], [], [], "interrupted"

    def measure(app, level: dict, level_spec: ServeSpec) -> Iterator:
        """One level run, summarized and stored (requests too)."""
        yield LevelStarted(len(summaries), level)
        records, rss = asyncio.run(_measured_level(app, level_spec, level))
        summary = summarize_level(level, records) | rss
        summary["slo_broken"] = broken_because(summary, spec)
        requests.extend({"level": len(summaries), **r} for r in records)
        summaries.append(summary)
        _save(db_path, sweep_id, summaries, requests, capacity=found)
        yield LevelFinished(len(summaries) - 1, summary)

    try:
        for batching, max_batch in apps:
            if should_stop():
                break
            with _app(spec, batching, max_batch, db_path) as app:
                floor_level = {"batching": batching, "max_batch": max_batch, "users": max_batch or spec.max_rows,
                               "floor": True}
                yield from measure(app, floor_level, floor_spec(spec))
                tried: dict[int, bool] = {}
                while (users := next_users(tried, spec.max_users)) is not None and not should_stop():
                    yield from measure(app, {"batching": batching, "max_batch": max_batch, "users": users}, spec)
                    tried[users] = summaries[-1]["slo_broken"] is None
                found.append(_result(spec, batching, max_batch, tried, summaries))
                _save(db_path, sweep_id, summaries, requests, capacity=found)
                yield CapacityFound(found[-1])
        status = "cancelled" if should_stop() else "finished"
    finally:
        _save(db_path, sweep_id, summaries, requests, status, capacity=found)
    yield ServeFinished(sweep_id, status, summaries)


def floor_spec(spec: ServeSpec) -> ServeSpec:
    """The floor's load: every user's one request started at once (no ramp), so every row generates together."""
    return replace(spec, ramp_s=0.0, requests_per_user=1)


def _result(spec: ServeSpec, batching, max_batch: int, tried: dict[int, bool], summaries: list[dict]) -> dict:
    held = max((n for n, ok in tried.items() if ok), default=0)
    broke = min((n for n, ok in tried.items() if not ok), default=None)
    ours = [s for s in summaries if (s["batching"], s["max_batch"]) == (batching, max_batch)]
    mine = [s for s in ours if not s.get("floor")]
    floor = next((s for s in ours if s.get("floor")), None)
    at = {s["users"]: s for s in mine}
    config = (at.get(held) or (mine[0] if mine else {})).get("config")
    result = {"batching": batching, "max_batch": max_batch, "streams": held, "broke_at": broke,
              "broken_because": at[broke]["slo_broken"] if broke else None, "config": config, "tokens": spec.tokens,
              "slo_ttfa_p99_s": spec.slo_ttfa_p99_s, "slo_continuity_pct": spec.slo_continuity_pct,
              "curve": [{"users": s["users"], "ttfa_p99_s": s["ttfa_p99_s"], "continuity_pct": s["continuity_pct"],
                         "held": s["slo_broken"] is None} for s in sorted(mine, key=lambda s: s["users"])],
              **floor_figures(held, floor)}
    return result | {"diagnosis": floor_diagnosis(result)}


def floor_figures(streams: int, floor: dict | None) -> dict:
    """The floor measured (its level's summary) as a capacity result keeps it: the real-time streams the machine
    makes with every row started together (audio seconds made per second; None when none was made), the rows it
    ran, and the capacity found as a percentage of it."""
    made = floor.get("audio_s_per_s") if floor else None
    return {"floor_streams": made, "floor_rows": floor["users"] if floor else None,
            "floor_pct": 100 * streams / made if made else None}


def floor_diagnosis(result: dict) -> str | None:
    """What limits the capacity found, in plain words, from its floor (None when no floor was measured)."""
    floor, pct = result.get("floor_streams"), result.get("floor_pct")
    if floor is None:
        return None
    if floor < 1:
        return Said("with every row started together this machine makes {floor:.1f} real-time streams of this "
                    "configuration: it cannot keep one listener fed, whatever the scheduling; a faster engine or "
                    "precision raises the floor", floor=floor)
    if pct >= FLOOR_REACHED_PCT:
        return Said("the capacity is at the machine's floor: more streams need a faster step (the floor raised), "
                    "not better scheduling")
    why = Said(" (at {users} streams: {why})", users=result["broke_at"], why=result["broken_because"]) \
        if result.get("broke_at") else ""
    return Said("{lost:.0f} % of what the machine makes is lost to scheduling{why}: first audio and stalls break the "
                "service level before the machine runs out of audio", lost=100 - pct, why=why)


def _scheduling(result: dict) -> Said:
    if result["batching"] == "continuous":
        return Said("continuous batching, {rows} rows", rows=result["max_batch"])
    if result["batching"]:
        return Said("request-level batching, batches of up to {size}", size=result["max_batch"])
    return Said("the running app's own scheduling")


def capacity_sentence(result: dict) -> str:
    """'This machine holds N real-time streams of this configuration', with what it means and what broke it."""
    floor = "" if result.get("floor_streams") is None else Said(
        ", {pct:.0f} % of the {floor:.1f} this machine makes with {rows} started together", pct=result["floor_pct"],
        floor=result["floor_streams"], rows=result["floor_rows"])
    broke = Said("; at {users}: {why}", users=result["broke_at"], why=result["broken_because"]) if result["broke_at"] \
        else Said(" (the most users tried: raise --max-users to look further)")
    diagnosis = Said(" Diagnosis: {diagnosis}.", diagnosis=result["diagnosis"]) if result.get("diagnosis") else ""
    return Said("this machine holds {streams} real-time stream(s) of this configuration ({config}; {how}; {tokens} "
                "tokens a request) with p99 first audio <= {ttfa:g} s and >= {continuity:g} % of streams without a "
                "stall over 100 ms{floor}{broke}.{diagnosis}", streams=result["streams"],
                config=result["config"] or Said("the app default"), how=_scheduling(result), tokens=result["tokens"],
                ttfa=result["slo_ttfa_p99_s"], continuity=result["slo_continuity_pct"], floor=floor, broke=broke,
                diagnosis=diagnosis)


def capacity_cost(result: dict, price: MachinePrice | None) -> str | None:
    """What an audio hour costs at the streams held: the machine's price per hour / streams (each stream plays one
    audio hour an hour)."""
    if price is None:
        return None
    cost = usd_per_audio_hour(price.usd_per_hour, result["streams"])
    if cost is None:
        return Said("at ${price:g} per hour ({source}), no cost per audio hour: not one stream held.",
                    price=price.usd_per_hour, source=price.source)
    return Said("at ${price:g} per hour ({source}), {streams} real-time stream(s) make audio at ${cost:.4g} per audio "
                "hour.", price=price.usd_per_hour, source=price.source, streams=result["streams"], cost=cost)


def capacity_gain(results: list[dict]) -> str | None:
    """Continuous against request-level batching in the same run."""
    best = {b: max((r["streams"] for r in results if r["batching"] == b), default=None) for b in ("continuous", "request")}
    if best["continuous"] is None or best["request"] is None:
        return None
    if best["continuous"] == best["request"] == 0:
        return Said("neither scheduling holds one real-time stream of this configuration within the service level.")
    if best["request"] == 0:
        return Said("continuous batching holds {streams} {stream} where request-level batching holds none.",
                    streams=best["continuous"], stream="stream" if best["continuous"] == 1 else "streams")
    return Said("continuous batching holds {ratio:.1f}x the real-time streams of request-level batching ({continuous} "
                "vs {request}).", ratio=best["continuous"] / best["request"], **best)


def capacity_frame(db_path):
    """One row per scheduling of every capacity run in the history, with the machine that ran it and, where the run
    has a machine price, its $ per audio hour (price / streams held)."""
    import pandas as pd

    from chattts_lab.history.store import Store

    rows = []
    with Store(db_path) as store:
        for sweep in store.sweeps_list():
            notes = store.notes(sweep["id"])
            price = price_from_notes(notes)
            cost = {} if price is None else {"usd_per_hour": price.usd_per_hour, "price_source": price.source}
            for result in (notes.get(NOTE) or {}).get("capacity") or []:
                if price is not None:
                    cost["usd_per_audio_hour"] = usd_per_audio_hour(price.usd_per_hour, result["streams"])
                rows.append({"sweep_id": sweep["id"], "machine": sweep["machine"],
                             **{k: v for k, v in result.items() if k != "curve"}, **cost})
    return pd.DataFrame(rows)


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"
