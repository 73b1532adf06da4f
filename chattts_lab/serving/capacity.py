"""Capacity: how many real-time streams this machine holds under a service level.

`python -m bench serve --capacity` starts the app once per scheduling (as the serving benchmark does), then
raises the number of closed-loop users (each one a stream: its next request as soon as the last is answered,
the users' starts spread over one clip's length) until the service level breaks: p99 time to first audio at
most `slo_ttfa_p99_s` and at least `slo_continuity_pct` % of the streams heard with no stall over 100 ms, with
every request answered. It doubles the users while the level holds, then halves the gap between the last level
that held and the first that broke. The answer, "this machine holds N real-time streams of this
configuration", is kept with the curve (every level tried) in the run's `serving` note, so the history, bundles
and comparisons across machines carry it like every other result.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from chattts_lab.history.price import MachinePrice, price_from_notes
from chattts_lab.metrics import SAMPLE_RATE, samples_for_tokens, usd_per_audio_hour
from chattts_lab.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted, _app,
                                          _measured_level, _save)
from chattts_lab.serving.summaries import NOTE, summarize_level


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
    try:
        for batching, max_batch in apps:
            if should_stop():
                break
            with _app(spec, batching, max_batch, db_path) as app:
                tried: dict[int, bool] = {}
                while (users := next_users(tried, spec.max_users)) is not None and not should_stop():
                    level = {"batching": batching, "max_batch": max_batch, "users": users}
                    yield LevelStarted(len(summaries), level)
                    records, rss = asyncio.run(_measured_level(app, spec, level))
                    summary = summarize_level(level, records) | rss
                    summary["slo_broken"] = broken_because(summary, spec)
                    tried[users] = summary["slo_broken"] is None
                    requests += [{"level": len(summaries), **r} for r in records]
                    summaries.append(summary)
                    _save(db_path, sweep_id, summaries, requests, capacity=found)
                    yield LevelFinished(len(summaries) - 1, summary)
                found.append(_result(spec, batching, max_batch, tried, summaries))
                _save(db_path, sweep_id, summaries, requests, capacity=found)
                yield CapacityFound(found[-1])
        status = "cancelled" if should_stop() else "finished"
    finally:
        _save(db_path, sweep_id, summaries, requests, status, capacity=found)
    yield ServeFinished(sweep_id, status, summaries)


def _result(spec: ServeSpec, batching, max_batch: int, tried: dict[int, bool], summaries: list[dict]) -> dict:
    held = max((n for n, ok in tried.items() if ok), default=0)
    broke = min((n for n, ok in tried.items() if not ok), default=None)
    mine = [s for s in summaries if (s["batching"], s["max_batch"]) == (batching, max_batch)]
    at = {s["users"]: s for s in mine}
    config = (at.get(held) or (mine[0] if mine else {})).get("config")
    return {"batching": batching, "max_batch": max_batch, "streams": held, "broke_at": broke,
            "broken_because": at[broke]["slo_broken"] if broke else None, "config": config, "tokens": spec.tokens,
            "slo_ttfa_p99_s": spec.slo_ttfa_p99_s, "slo_continuity_pct": spec.slo_continuity_pct,
            "curve": [{"users": s["users"], "ttfa_p99_s": s["ttfa_p99_s"], "continuity_pct": s["continuity_pct"],
                       "held": s["slo_broken"] is None} for s in sorted(mine, key=lambda s: s["users"])]}


def capacity_sentence(result: dict) -> str:
    """'This machine holds N real-time streams of this configuration', with what it means and what broke it."""
    how = (f"continuous batching, {result['max_batch']} rows" if result["batching"] == "continuous"
           else f"request-level batching, batches of up to {result['max_batch']}" if result["batching"]
           else "the running app's own scheduling")
    sentence = (f"this machine holds {result['streams']} real-time stream(s) of this configuration "
                f"({result['config'] or 'the app default'}; {how}; {result['tokens']} tokens a request) with p99 "
                f"first audio <= {result['slo_ttfa_p99_s']:g} s and >= {result['slo_continuity_pct']:g} % of "
                f"streams without a stall over 100 ms")
    if result["broke_at"]:
        sentence += f"; at {result['broke_at']}: {result['broken_because']}"
    else:
        sentence += " (the most users tried: raise --max-users to look further)"
    return sentence + "."


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
    best = {b: max((r["streams"] for r in results if r["batching"] == b), default=None) for b in ("continuous", "request")}
    if best["continuous"] is None or best["request"] is None:
        return None
    if best["continuous"] == best["request"] == 0:
        return "neither scheduling holds one real-time stream of this configuration within the service level."
    if best["request"] == 0:
        return (f"continuous batching holds {best['continuous']} stream{'s' if best['continuous'] != 1 else ''} "
                "where request-level batching holds none.")
    return (f"continuous batching holds {best['continuous'] / best['request']:.1f}x the real-time streams of "
            f"request-level batching ({best['continuous']} vs {best['request']}).")


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
