"""`python -m bench serve`: many users against the real app, with and without dynamic batching.

    python -m bench serve --model synthetic --engine lab --precision int8 --users 1,2,4,8 --max-batch 8,1
    python -m bench serve --url http://lan-box:7860/ --users 1,4,16         # a running app, as it is
    python -m bench serve --model synthetic --rate 0.5 --duration 1800 --mixed  # a 30-minute soak, mixed requests
    python -m bench serve --model synthetic --engine lab --precision int8 --capacity --tokens 256  # streams held

Each run is stored in the same history as sweeps (`python -m bench --list`, --export, --import).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from bench.options import add_price_options, price_from_args
from bench.serving.capacity import CapacityFound, capacity_cost, capacity_gain, capacity_sentence, run_capacity
from chattts_lab.history.price import with_cost
from chattts_lab.history.store import save_price
from chattts_lab.history.report import markdown_table
from chattts_lab.history.store import DEFAULT_DB
from bench.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted,
                                          run_serving)
from bench.serving.summaries import batching_gain
from chattts_lab.checks import SpecError
from chattts_lab.options import add_spec_options
from chattts_lab.requests import CONTINUOUS

COLUMNS = ("batching", "scheduling", "max_batch", "floor", "users", "rate", "requests", "ok", "errors", "lost",
           "audio_s_per_s", "usd_per_audio_hour", "queue_p50_s",
           "queue_p90_s", "ttfb_p90_s", "ttfa_p50_s", "ttfa_p90_s", "ttfa_p99_s", "latency_p50_s", "latency_p90_s", "latency_p99_s",
           "stall_worst_p50_s", "stall_worst_p90_s", "stall_worst_p99_s", "stall_total_p90_s", "continuity_pct",
           "batch_sizes", "rss_growth_pct", "rss_late_growth_pct", "slo_broken")


def add_parser(commands) -> argparse.ArgumentParser:
    """`serve` as a subcommand of `python -m bench`: one option per ServeSpec field, plus where to keep the run."""
    p = commands.add_parser("serve", help="the serving benchmark: many users against the real app",
                            description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_spec_options(p, ServeSpec, "measurement")
    p.add_argument("--db", default=str(DEFAULT_DB), help="SQLite file that keeps every run")
    add_price_options(p)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(serve_parser=p)  # its usage errors are the subcommand's own
    return p


def spec_from_args(args: argparse.Namespace) -> ServeSpec:
    return ServeSpec.from_choices(vars(args))


def run(args: argparse.Namespace) -> int:
    try:
        spec, price = spec_from_args(args), price_from_args(args)
    except SpecError as exc:
        args.serve_parser.error(str(exc))
    found: list[dict] = []
    try:
        for event in (run_capacity if spec.capacity else run_serving)(spec, args.db):
            if isinstance(event, ServeStarted):
                save_price(args.db, event.sweep_id, price)
            if isinstance(event, CapacityFound):
                found.append(event.result)
                print(f"- {capacity_sentence(event.result)}")
                if cost := capacity_cost(event.result, price):
                    print(f"- {cost}")
            _show(event, spec, price)
            if isinstance(event, ServeFinished) and (gain := capacity_gain(found)):
                print(f"- {gain}")
            if isinstance(event, ServeFinished):
                return 0 if event.status == "finished" else 1
    except KeyboardInterrupt:
        print("\ninterrupted: the finished levels are kept", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # the app would not start or serve: its log says why
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1


def _show(event, spec: ServeSpec, price=None) -> None:
    if isinstance(event, ServeStarted):
        print(f"serving run {event.sweep_id}: " + (f"{event.levels} load levels" if event.levels else
                                                    "capacity search"), file=sys.stderr)
    elif isinstance(event, LevelStarted):
        users = event.level.get("users")
        load = f"{users} user{'s' * (users != 1)}" if users else f"{event.level['rate']:g} req/s"
        limit = event.level["max_batch"] or "unknown (the app did not say)"
        how = (f"continuous, {limit} rows" if event.level.get("batching") == CONTINUOUS else f"max batch {limit}")
        floor = " (the floor: every row started at once)" if event.level.get("floor") else ""
        print(f"level {event.index + 1}: {load}, {how}{floor}…", file=sys.stderr)
    elif isinstance(event, LevelFinished):
        s = event.summary
        print(f"  served {s['ok']} of {s['requests']} ({s['errors']} errors, {s['lost']} lost), "
              f"{_num(s['audio_s_per_s'])} audio s/s, p90 latency {_num(s['latency_p90_s'])} s, "
              f"p99 first audio {_num(s['ttfa_p99_s'])} s, continuity {_num(s['continuity_pct'])} %, "
              f"batches {s['batch_sizes']}", file=sys.stderr)
    elif isinstance(event, ServeFinished):
        frame = with_cost(pd.DataFrame(event.summaries), price)
        print(markdown_table(frame, [c for c in COLUMNS if c in frame.columns]))
        if price is not None:
            print(f"- {price.sentence()}")
        for users in spec.users:
            if (sentence := batching_gain(event.summaries, users)):
                print(f"- {sentence}")
        print(f"serving run {event.sweep_id} {event.status}", file=sys.stderr)


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"
