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

from bench.cli import _argument, int_list, parse_with_logging, str_list
from chattts_lab import grid
from chattts_lab.capacity import CapacityFound, capacity_gain, capacity_sentence, run_capacity
from chattts_lab.report import markdown_table
from chattts_lab.serving import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted, batching_gain,
                                 run_serving)
from chattts_lab.spec import SpecError

COLUMNS = ("batching", "scheduling", "max_batch", "users", "rate", "requests", "ok", "errors", "lost", "audio_s_per_s", "queue_p50_s",
           "queue_p90_s", "ttfb_p90_s", "ttfa_p50_s", "ttfa_p90_s", "ttfa_p99_s", "latency_p50_s", "latency_p90_s", "latency_p99_s",
           "stall_worst_p50_s", "stall_worst_p90_s", "stall_worst_p99_s", "stall_total_p90_s", "continuity_pct",
           "batch_sizes", "rss_growth_pct", "slo_broken")


def float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    defaults = ServeSpec()
    p = argparse.ArgumentParser(prog="python -m bench serve", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=defaults.model, help="auto, hf, synthetic, synthetic-tiny or a folder")
    p.add_argument("--url", help="measure this running app as it is, instead of starting one per --max-batch")
    p.add_argument("--users", type=int_list, default=None,
                   help=f"concurrent users per level, closed loop (default {','.join(map(str, defaults.users))} "
                        "unless --rate is given)")
    p.add_argument("--requests", type=int, default=defaults.requests_per_user, help="requests per user, one after another")
    p.add_argument("--rate", type=float_list, default=(), help="open-loop levels: requests per second (Poisson)")
    p.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of each --rate level")
    p.add_argument("--max-batch", type=int_list, default=defaults.max_batches,
                   help="the app's batch limit, one app per value (1: one request at a time, as without batching)")
    p.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms, help="the app's wait for company")
    p.add_argument("--batching", type=str_list, default=defaults.batching,
                   help="continuous (requests join the running generation at the next step; one app, --max-rows "
                        "rows) and/or request (request-level batches; one app per --max-batch)")
    p.add_argument("--max-rows", type=int, default=defaults.max_rows, help="continuous batching: rows at once")
    for flag in ("engine", "precision", "device"):
        p.add_argument(f"--{flag}", help=f"the app's {flag} (default: the app's own choice)")
    p.add_argument("--threads", type=int, help="the app's torch threads (default: the usable cores)")
    p.add_argument("--tokens", type=int, default=defaults.tokens, help="audio tokens per request, exactly")
    p.add_argument("--stream", type=_argument(grid.bool_list), default=(defaults.stream,),
                   help="on: streamed responses (time to first audio); off: whole files")
    p.add_argument("--mixed", action="store_true",
                   help="vary the requests (voices, streamed or whole, full or half length), as in a soak test")
    p.add_argument("--capacity", action="store_true",
                   help="raise the users until the service level breaks and report how many real-time streams hold")
    p.add_argument("--slo-ttfa-p99", type=float, default=defaults.slo_ttfa_p99_s,
                   help="capacity's service level: p99 time to first audio at most this many seconds...")
    p.add_argument("--slo-continuity", type=float, default=defaults.slo_continuity_pct,
                   help="...and at least this %% of streams with no stall over 100 ms")
    p.add_argument("--max-users", type=int, default=defaults.max_users, help="capacity: the most users tried")
    p.add_argument("--db", default="results/lab.sqlite", help="SQLite file that keeps every run")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def spec_from_args(args: argparse.Namespace) -> ServeSpec:
    if len(args.stream) != 1:
        raise SpecError("--stream takes one value here (on or off)")
    users = args.users if args.users is not None else (() if args.rate or args.capacity else ServeSpec.users)
    return ServeSpec(model=args.model, url=args.url, users=tuple(users), requests_per_user=args.requests,
                     rates=args.rate, duration_s=args.duration,
                     max_batches=(0,) if args.url else tuple(args.max_batch), max_wait_ms=args.max_wait_ms,
                     batching=tuple(args.batching), max_rows=args.max_rows, capacity=args.capacity,
                     slo_ttfa_p99_s=args.slo_ttfa_p99, slo_continuity_pct=args.slo_continuity,
                     max_users=args.max_users,
                     engine=args.engine, precision=args.precision, device=args.device, threads=args.threads,
                     tokens=args.tokens, stream=args.stream[0], mixed=args.mixed).validate()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_with_logging(parser, argv)
    try:
        spec = spec_from_args(args)
    except SpecError as exc:
        parser.error(str(exc))
    found: list[dict] = []
    try:
        for event in (run_capacity if spec.capacity else run_serving)(spec, args.db):
            if isinstance(event, CapacityFound):
                found.append(event.result)
                print(f"- {capacity_sentence(event.result)}")
            _show(event, spec)
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


def _show(event, spec: ServeSpec) -> None:
    if isinstance(event, ServeStarted):
        print(f"serving run {event.sweep_id}: " + (f"{event.levels} load levels" if event.levels else
                                                    "capacity search"), file=sys.stderr)
    elif isinstance(event, LevelStarted):
        load = f"{event.level['users']} users" if "users" in event.level else f"{event.level['rate']:g} req/s"
        how = (f"continuous, {event.level['max_batch']} rows" if event.level.get("batching") == "continuous"
               else f"max batch {event.level['max_batch']}")
        print(f"level {event.index + 1}: {load}, {how}…", file=sys.stderr)
    elif isinstance(event, LevelFinished):
        s = event.summary
        print(f"  served {s['ok']} of {s['requests']} ({s['errors']} errors, {s['lost']} lost), "
              f"{_num(s['audio_s_per_s'])} audio s/s, p90 latency {_num(s['latency_p90_s'])} s, "
              f"p99 first audio {_num(s['ttfa_p99_s'])} s, continuity {_num(s['continuity_pct'])} %, "
              f"batches {s['batch_sizes']}", file=sys.stderr)
    elif isinstance(event, ServeFinished):
        frame = pd.DataFrame(event.summaries)
        print(markdown_table(frame, [c for c in COLUMNS if c in frame.columns]))
        for users in spec.users:
            if (sentence := batching_gain(event.summaries, users)):
                print(f"- {sentence}")
        print(f"serving run {event.sweep_id} {event.status}", file=sys.stderr)


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"
