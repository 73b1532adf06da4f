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
from chattts_lab.metrics import SAMPLE_RATE, samples_for_tokens, usd_per_audio_hour
from chattts_lab.requests import CONTINUOUS, REQUEST_LEVEL, SCHEDULINGS
from bench.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted, _app,
                                          _measured_level, _save)
from bench.serving.summaries import NOTE, summarize_level

FLOOR_REACHED_PCT = 85  # a capacity at this share of its floor is limited by the machine, not by scheduling


@dataclass
class CapacityFound:
    """One scheduling's answer: `streams` held (0: not even one), and the level that broke it."""

    result: dict


def broken_because(summary: dict, spec: ServeSpec) -> str | None:
    """Why this level misses the service level (None: it holds)."""
    if summary["ok"] < summary["requests"]:
        return f"{summary['requests'] - summary['ok']} of {summary['requests']} requests failed or were lost"
    ttfa, continuity = summary.get("ttfa_p99_s"), summary.get("continuity_pct")
    if ttfa is None or ttfa > spec.slo_ttfa_p99_s:
        return f"p99 time to first audio {_num(ttfa)} s > {spec.slo_ttfa_p99_s:g} s"
    if continuity is None or continuity < spec.slo_continuity_pct:
        return f"continuity {_num(continuity)} % < {spec.slo_continuity_pct:g} %"
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
        return (f"with every row started together this machine makes {floor:.1f} real-time streams of this "
                "configuration: it cannot keep one listener fed, whatever the scheduling; a faster engine or "
                "precision raises the floor")
    if pct >= FLOOR_REACHED_PCT:
        return ("the capacity is at the machine's floor: more streams need a faster step (the floor raised), "
                "not better scheduling")
    why = f" (at {result['broke_at']} streams: {result['broken_because']})" if result.get("broke_at") else ""
    return (f"{100 - pct:.0f} % of what the machine makes is lost to scheduling{why}: first audio and stalls "
            "break the service level before the machine runs out of audio")


def capacity_sentence(result: dict) -> str:
    """'This machine holds N real-time streams of this configuration', with what it means and what broke it."""
    how = (f"continuous batching, {result['max_batch']} rows" if result["batching"] == CONTINUOUS
           else f"request-level batching, batches of up to {result['max_batch']}" if result["batching"]
           else "the running app's own scheduling")
    sentence = (f"this machine holds {result['streams']} real-time stream(s) of this configuration "
                f"({result['config'] or 'the app default'}; {how}; {result['tokens']} tokens a request) with p99 "
                f"first audio <= {result['slo_ttfa_p99_s']:g} s and >= {result['slo_continuity_pct']:g} % of "
                f"streams without a stall over 100 ms")
    if result.get("floor_streams") is not None:
        sentence += (f", {result['floor_pct']:.0f} % of the {result['floor_streams']:.1f} this machine makes with "
                     f"{result['floor_rows']} started together")
    if result["broke_at"]:
        sentence += f"; at {result['broke_at']}: {result['broken_because']}"
    else:
        sentence += " (the most users tried: raise --max-users to look further)"
    sentence += "."
    return sentence + (f" Diagnosis: {result['diagnosis']}." if result.get("diagnosis") else "")


def capacity_cost(result: dict, price: MachinePrice | None) -> str | None:
    """What an audio hour costs at the streams held: the machine's price per hour / streams (each stream plays one
    audio hour an hour)."""
    if price is None:
        return None
    cost = usd_per_audio_hour(price.usd_per_hour, result["streams"])
    if cost is None:
        return f"at ${price.usd_per_hour:g} per hour ({price.source}), no cost per audio hour: not one stream held."
    return (f"at ${price.usd_per_hour:g} per hour ({price.source}), {result['streams']} real-time stream(s) make "
            f"audio at ${cost:.4g} per audio hour.")


def capacity_gain(results: list[dict]) -> str | None:
    """Continuous against request-level batching in the same run."""
    best = {b: max((r["streams"] for r in results if r["batching"] == b), default=None) for b in SCHEDULINGS}
    if best[CONTINUOUS] is None or best[REQUEST_LEVEL] is None:
        return None
    if best[CONTINUOUS] == best[REQUEST_LEVEL] == 0:
        return "neither scheduling holds one real-time stream of this configuration within the service level."
    if best[REQUEST_LEVEL] == 0:
        return (f"continuous batching holds {best[CONTINUOUS]} stream{'s' if best[CONTINUOUS] != 1 else ''} "
                "where request-level batching holds none.")
    return (f"continuous batching holds {best[CONTINUOUS] / best[REQUEST_LEVEL]:.1f}x the real-time streams of "
            f"request-level batching ({best[CONTINUOUS]} vs {best[REQUEST_LEVEL]}).")


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
