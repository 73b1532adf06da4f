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

A figure to trust: every level measures at least `min_streams` streams (one stall then moves continuity by a few
points, not 25-50), the deciding level is measured twice (the run-to-run spread; one that breaks the second time is
not held, and the search goes on below it), and the answer is confirmed by Poisson arrivals at `confirm_load_pct` %
of it for `confirm_s` seconds (`confirmation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from chattts_lab.history.price import MachinePrice, price_from_notes
from chattts_lab.said import Said
from chattts_lab.metrics import SAMPLE_RATE, audio_seconds, samples_for_tokens, usd_per_audio_hour
from chattts_lab.requests import CONTINUOUS, REQUEST_LEVEL, SCHEDULINGS
from bench.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted, _app,
                                          _measured_level, _save, run_to_end)
from bench.serving.summaries import NOTE, summarize_level

FLOOR_REACHED_PCT = 85  # a capacity at this share of its floor is limited by the machine, not by scheduling
# a stream made at less than this many times real time has too little headroom to be stall-free (AVX2-only EPYCs: a
# lone lab int8 listener at 0.90, all stalled; 3 rows at 1.02 each, 81 % continuous; docs/measurements/2026-12-0[56]-*)
LONE_HEADROOM = 1.25


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
        run = _CapacityRun(spec, db_path, store.create_sweep(spec.as_dict(), capture_environment()), should_stop)
    yield ServeStarted(run.sweep_id, 0)  # how many levels is what the search finds out
    status = "interrupted"
    try:
        for batching, max_batch in spec.apps():
            if should_stop():
                break
            with _app(spec, batching, max_batch, db_path) as app:
                yield from run.search(app, batching, max_batch)
        status = "cancelled" if should_stop() else "finished"
    finally:
        run.save(status)
    yield ServeFinished(run.sweep_id, status, run.summaries)


@dataclass
class _CapacityRun:
    """One capacity run's levels, requests and answers, stored after every level."""

    spec: ServeSpec
    db_path: object
    sweep_id: int
    should_stop: Callable[[], bool]
    summaries: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    found: list = field(default_factory=list)

    def save(self, status: str | None = None) -> None:
        _save(self.db_path, self.sweep_id, self.summaries, self.requests, status, capacity=self.found)

    def measure(self, app, level: dict, level_spec: ServeSpec) -> Iterator:
        """One level run, summarized and stored (requests too)."""
        yield LevelStarted(len(self.summaries), level)
        records, rss = run_to_end(_measured_level(app, level_spec, level))
        summary = summarize_level(level, records) | rss
        summary["slo_broken"] = broken_because(summary, self.spec)
        self.requests.extend({"level": len(self.summaries), **r} for r in records)
        self.summaries.append(summary)
        self.save()
        yield LevelFinished(len(self.summaries) - 1, summary)

    def search(self, app, batching, max_batch: int) -> Iterator:
        """The floor, the search, then the deciding level again and the Poisson run that confirm what it found."""
        spec, at = self.spec, {"batching": batching, "max_batch": max_batch}
        yield from self.measure(app, at | {"users": max_batch or spec.max_rows, "floor": True}, floor_spec(spec))
        tried: dict[int, bool] = {}
        broke_again: dict[int, str] = {}  # levels that held, then broke when measured again: why
        while True:
            while (users := next_users(tried, spec.max_users)) is not None and not self.should_stop():
                yield from self.measure(app, at | {"users": users}, level_spec(spec, users))
                tried[users] = self.summaries[-1]["slo_broken"] is None
            result = _result(spec, batching, max_batch, tried, self.summaries, broke_again)
            if not result["streams"] or self.should_stop():
                break
            # the deciding level once more: the run-to-run spread. One that breaks then is not a level the machine
            # holds (a Poisson run at 80 % of it would be overloaded): the search goes on below it.
            yield from self.measure(app, at | {"users": result["streams"], "repeat": True},
                                    level_spec(spec, result["streams"]))
            result |= spread(result, self.summaries[-1])
            if result["repeat_held"]:
                break
            tried[result["streams"]] = False
            broke_again[result["streams"]] = Said("{why} when measured again", why=result["repeat_broken_because"])
        if result["streams"] and spec.confirm_s and not self.should_stop():
            yield from self.measure(app, at | {"rate": confirm_rate(spec, result["streams"]), "confirm": True},
                                    replace(spec, duration_s=spec.confirm_s))
            result |= confirmation(spec, result, self.summaries[-1], self.summaries)
        self.found.append(result)
        self.save()
        yield CapacityFound(result)


def level_spec(spec: ServeSpec, users: int) -> ServeSpec:
    """A search level's load: each user's requests one after another, enough that the level measures at least
    `min_streams` streams (one stall then moves continuity by 5 points at most, not 25-50)."""
    return replace(spec, requests_per_user=max(spec.requests_per_user, -(-spec.min_streams // users)))


def spread(result: dict, repeat: dict) -> dict:
    """The deciding level measured twice: the spread of its p99 first audio and continuity between the runs, and
    whether the second run held too."""
    first = next(c for c in result["curve"] if c["users"] == result["streams"])
    pair = lambda key: sorted(v for v in (first[key], repeat[key]) if v is not None)
    return {"repeat_held": repeat["slo_broken"] is None, "repeat_broken_because": repeat["slo_broken"],
            "ttfa_p99_spread_s": pair("ttfa_p99_s"), "continuity_spread_pct": pair("continuity_pct")}


CONFIRM_TTFA_X = 2.0  # the confirmation's p90 first audio may be at most this many times a lone listener's...
CONFIRM_CONTINUITY_PCT = 95.0  # ...with at least this % of streams continuous and none failed or lost


def confirm_rate(spec: ServeSpec, streams: int) -> float:
    """Requests a second that keep `confirm_load_pct` % of `streams` listening on average (Little's law: each
    stream lasts about its clip when it plays in real time)."""
    clip_s = samples_for_tokens(spec.tokens) / SAMPLE_RATE
    return round(spec.confirm_load_pct / 100 * streams / clip_s, 4)


def confirmation(spec: ServeSpec, result: dict, poisson: dict, summaries: list[dict]) -> dict:
    """The Poisson run's verdict on the capacity found, against a lone listener's first audio in the same app."""
    lone = next((s for s in summaries if s.get("users") == 1 and not s.get("floor") and not s.get("repeat")
                 and (s["batching"], s["max_batch"]) == (result["batching"], result["max_batch"])), None)
    lone_ttfa = lone and lone.get("ttfa_p50_s")
    ttfa, continuity = poisson.get("ttfa_p90_s"), poisson.get("continuity_pct")
    failed = poisson["requests"] - poisson["ok"]
    because = (Said("{lost} of {requests} requests failed or were lost", lost=failed, requests=poisson["requests"])
               if failed or not poisson["requests"]
               else _slow_first_audio(ttfa, lone_ttfa, poisson.get("queue_p90_s"), result)
               if ttfa is None or not lone_ttfa or ttfa > CONFIRM_TTFA_X * lone_ttfa
               else Said("continuity {continuity} % < {limit:g} %", continuity=_num(continuity),
                         limit=CONFIRM_CONTINUITY_PCT)
               if continuity is None or continuity < CONFIRM_CONTINUITY_PCT else None)
    return {"confirm": {"rate": poisson["rate"], "load_pct": spec.confirm_load_pct, "duration_s": spec.confirm_s,
                        "requests": poisson["requests"], "ttfa_p90_s": ttfa, "lone_ttfa_p50_s": lone_ttfa,
                        "continuity_pct": continuity, "held": because is None, "broken_because": because}}


def _slow_first_audio(ttfa: float | None, lone_ttfa: float | None, queue_p90: float | None, result: dict) -> Said:
    """Why the Poisson run's first audio was too slow: the wait for a free row, named where it made half of it or
    more (random arrivals come in bursts, and at 80 % of N streams more than N want a row a fifth of the time or so:
    docs/measurements/2026-12-05-newcomer-first.md); and a full loop's slowness, named where a row beside the others
    is made more than CONFIRM_TTFA_X times slower than alone (a newcomer's first chunk then takes that many times a
    lone listener's before any wait: docs/measurements/2026-12-06-first-audio-floor.md)."""
    waiting = Said(", mostly waiting for a free row (p90 {queue} s): bursts of arrivals found every row busy",
                   queue=_num(queue_p90)) if ttfa and queue_p90 and queue_p90 >= ttfa / 2 else ""
    rows, each, lone = result.get("floor_rows"), floor_per_row(result), result.get("lone_speed")
    full_loop = Said("; beside {others} others a row is made {slower:.1f}x slower than alone ({each:.2f} against "
                     "{lone:.2f} s of audio a second), so a first audio in a full loop takes about that many times a "
                     "lone listener's before any wait", others=rows - 1, slower=lone / each, each=each, lone=lone) \
        if each and lone and lone / each > CONFIRM_TTFA_X else ""
    return Said("p90 first audio {ttfa} s > {x:g}x a lone listener's {lone} s{waiting}{full_loop}", ttfa=_num(ttfa),
                x=CONFIRM_TTFA_X, lone=_num(lone_ttfa), waiting=waiting, full_loop=full_loop)


def floor_spec(spec: ServeSpec) -> ServeSpec:
    """The floor's load: every user's one request started at once (no ramp), so every row generates together."""
    return replace(spec, ramp_s=0.0, requests_per_user=1)


def _result(spec: ServeSpec, batching, max_batch: int, tried: dict[int, bool], summaries: list[dict],
            broke_again: dict[int, str]) -> dict:
    """What the search found; `broke_again`: the levels that held once and broke when measured again, and why."""
    held = max((n for n, ok in tried.items() if ok), default=0)
    broke = min((n for n, ok in tried.items() if not ok), default=None)
    ours = [s for s in summaries if (s["batching"], s["max_batch"]) == (batching, max_batch)]
    mine = [s for s in ours if not (s.get("floor") or s.get("repeat") or s.get("confirm"))]
    floor = next((s for s in ours if s.get("floor")), None)
    at = {s["users"]: s for s in mine}
    config = (at.get(held) or (mine[0] if mine else {})).get("config")
    # the level that broke: its median stream's time once admitted (a wait for a row or a batch is scheduling's)
    broken = at.get(broke) or {}
    made_s = (broken.get("latency_p50_s") or 0) - (broken.get("queue_p50_s") or 0)
    result = {"batching": batching, "max_batch": max_batch, "streams": held, "broke_at": broke,
              "broken_because": broke_again.get(broke) or at[broke]["slo_broken"] if broke else None,
              "config": config, "tokens": spec.tokens,
              "slo_ttfa_p99_s": spec.slo_ttfa_p99_s, "slo_continuity_pct": spec.slo_continuity_pct,
              "curve": [{"users": s["users"], "ttfa_p99_s": s["ttfa_p99_s"], "continuity_pct": s["continuity_pct"],
                         "held": s["slo_broken"] is None and s["users"] not in broke_again}
                        for s in sorted(mine, key=lambda s: s["users"])],
              **floor_figures(held, floor), "lone_speed": (at.get(1) or {}).get("audio_s_per_s"),
              "broke_speed": audio_seconds(spec.tokens) / made_s if made_s > 0 else None}  # in real times
    return result | {"diagnosis": floor_diagnosis(result)}


def floor_figures(streams: int, floor: dict | None) -> dict:
    """The floor measured (its level's summary) as a capacity result keeps it: the real-time streams the machine
    makes with every row started together (audio seconds made per second; None when none was made), the rows it
    ran, and the capacity found as a percentage of it."""
    made = floor.get("audio_s_per_s") if floor else None
    return {"floor_streams": made, "floor_rows": floor["users"] if floor else None,
            "floor_pct": 100 * streams / made if made else None}


def floor_per_row(result: dict) -> float | None:
    """Audio seconds a second each row made in the floor (every row generating): its speed in a full loop."""
    rows, floor = result.get("floor_rows"), result.get("floor_streams")
    return floor / rows if rows and floor else None


def floor_diagnosis(result: dict) -> str | None:
    """What limits the capacity found, in plain words, from its floor (None when no floor was measured)."""
    floor, pct = result.get("floor_streams"), result.get("floor_pct")
    if floor is None:
        return None
    if floor < 1:
        return Said("with every row started together this machine makes {floor:.1f} real-time streams of this "
                    "configuration: it cannot keep one listener fed, whatever the scheduling; a faster engine or "
                    "precision raises the floor", floor=floor)
    lone = result.get("lone_speed")
    if result["streams"] == 0 and lone is not None and lone < LONE_HEADROOM:
        return Said("one listener alone is served {lone:.2f} s of audio a second here, where real time needs 1 and "
                    "a stall-free stream needs headroom: a lone stream's steps and chunk decodes are too slow, "
                    "whatever the scheduling; a faster engine or precision raises it", lone=lone)
    rows = result.get("floor_rows")
    if result["batching"] == CONTINUOUS and rows and result["streams"] >= rows:
        return Said("every one of the {rows} rows streams in real time, so the capacity is the row limit (--max-rows): "
                    "started together they make {floor:.1f} s of audio a second, {each:.2f}x real time each, and a "
                    "row more would leave each {more:.2f}x, little headroom for stalls where that is near 1",
                    rows=rows, floor=floor, each=floor_per_row(result), more=floor / (rows + 1))
    if pct >= FLOOR_REACHED_PCT:
        return Said("the capacity is at the machine's floor: more streams need a faster step (the floor raised), "
                    "not better scheduling")
    speed = result.get("broke_speed")
    if speed is not None and speed < LONE_HEADROOM and result.get("broke_at"):
        return Said("at {users} streams each is made at only {speed:.2f}x real time (median), too little headroom for "
                    "a stall-free stream whatever the scheduling; {rows} rows started together make more audio only "
                    "by sharing the GPT's steps (each row's prompt and chunk decodes are its own): a faster engine "
                    "or precision, or cheaper chunk decodes, raise it", users=result["broke_at"], speed=speed,
                    rows=rows)
    why = Said(" (at {users} streams: {why})", users=result["broke_at"], why=result["broken_because"]) \
        if result.get("broke_at") else ""
    return Said("{lost:.0f} % of what the machine makes is lost to scheduling{why}: first audio and stalls break the "
                "service level before the machine runs out of audio", lost=100 - pct, why=why)


def _scheduling(result: dict) -> Said:
    if result["batching"] == CONTINUOUS:
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
                "stall over 100 ms{floor}{broke}.{trust}{diagnosis}", streams=result["streams"],
                config=result["config"] or Said("the app default"), how=_scheduling(result), tokens=result["tokens"],
                ttfa=result["slo_ttfa_p99_s"], continuity=result["slo_continuity_pct"], floor=floor, broke=broke,
                trust=trust_sentence(result), diagnosis=diagnosis)


def trust_sentence(result: dict) -> str:
    """How far the figure can be trusted: the deciding level measured again, and the Poisson run that confirms it
    ('' where neither ran: no stream held, or an older run)."""
    said = []
    if "repeat_held" in result:
        broke = "" if result["repeat_held"] else Said("; the second run broke ({why})",
                                                      why=result["repeat_broken_because"])
        said.append(Said(" Measured twice at {streams}: p99 first audio {ttfa}, continuity {continuity}{broke}.",
                         streams=result["streams"], ttfa=_span(result["ttfa_p99_spread_s"], "s"),
                         continuity=_span(result["continuity_spread_pct"], "%"), broke=broke))
    if confirm := result.get("confirm"):
        verdict = Said("confirmed") if confirm["held"] else Said("not confirmed ({why})", why=confirm["broken_because"])
        said.append(Said(" Poisson arrivals at {load:g} % of it for {duration:g} s ({requests} requests): {verdict}; "
                         "p90 first audio {ttfa} s against a lone listener's {lone} s, continuity {continuity} %.",
                         load=confirm["load_pct"], duration=confirm["duration_s"], requests=confirm["requests"],
                         verdict=verdict, ttfa=_num(confirm["ttfa_p90_s"]), lone=_num(confirm["lone_ttfa_p50_s"]),
                         continuity=_num(confirm["continuity_pct"])))
    return Said.joined(said, "")


def _span(values: list[float], unit: str) -> str:
    return "-" if not values else f"{values[0]:.2f} {unit}" if len(values) == 1 or values[0] == values[-1] else \
        f"{values[0]:.2f}-{values[-1]:.2f} {unit}"


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
    best = {b: max((r["streams"] for r in results if r["batching"] == b), default=None) for b in SCHEDULINGS}
    if best[CONTINUOUS] is None or best[REQUEST_LEVEL] is None:
        return None
    if best[CONTINUOUS] == best[REQUEST_LEVEL] == 0:
        return Said("neither scheduling holds one real-time stream of this configuration within the service level.")
    if best[REQUEST_LEVEL] == 0:
        return Said("continuous batching holds {streams} {stream} where request-level batching holds none.",
                    streams=best[CONTINUOUS], stream="stream" if best[CONTINUOUS] == 1 else "streams")
    return Said("continuous batching holds {ratio:.1f}x the real-time streams of request-level batching ({continuous} "
                "vs {request}).", ratio=best[CONTINUOUS] / best[REQUEST_LEVEL], continuous=best[CONTINUOUS],
                request=best[REQUEST_LEVEL])


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
