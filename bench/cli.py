"""The `bench` command line over chattts_lab.sweep.runner (the app's benchmark tab calls the same code).

    python -m bench --model synthetic --precision fp32,bf16,int8 --batch 1,4,8 --threads 1,2 --tokens 128 --repeats 3
    python -m bench --resume                 # finish the latest interrupted sweep
    python -m bench list                     # history (bench/history_cli.py: report, export, import, compare)
    python -m bench serve --capacity         # the serving benchmark (bench/serving/cli.py)
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from bench import history_cli
from bench.options import add_price_options, price_from_args
from bench.serving import cli as serve_cli
from chattts_lab.sweep import grid
from chattts_lab.trackers.env import load_average, usable_cores
from chattts_lab.history.report import FORMATS, bandwidth_lines
from chattts_lab.options import add_spec_options, argparse_type, as_text
from chattts_lab.sweep.spec import SpecError, SweepSpec, cell_rule
from chattts_lab.history.store import DEFAULT_DB, Store, save_price
from chattts_lab.sweep.runner import (
    CallTimed,
    CellFinished,
    CellStarted,
    FidelityFinished,
    FidelityStarted,
    PassStarted,
    QualityStarted,
    SweepFinished,
    SweepPlanned,
    SweepStarted,
    resumable_sweep,
    resume_refusal,
    run_sweep,
    unused_settings,
)

log = logging.getLogger("bench")


int_list, str_list, bool_list = argparse_type(grid.int_list), argparse_type(grid.str_list), argparse_type(grid.bool_list)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults as they are typed ("cpu", "off,on"; not "('cpu',)"), and none where the help says its own."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
            return text
        return f"{text} (default: {as_text(action.default).replace('%', '%%')})"  # help is %-formatted


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Sweep ChatTTS configurations (the cartesian product of comma lists) and keep every result.",
        formatter_class=DefaultsHelp,
    )
    g = p.add_argument_group("the grid (comma lists; integer ranges lo-hi, lo-hi+step, lo-hi*factor)")
    add_spec_options(g, SweepSpec, "grid")
    m = p.add_argument_group("measurement")
    add_spec_options(m, SweepSpec, "measurement")
    m.add_argument("--memory-allowance-mb", type=float, default=None,
                   help="memory the interleaved workers may take together (default: 80%% of what is available); "
                        "workers that do not fit are reloaded before their turn in each pass")
    c = p.add_argument_group("fleet (Ray; pip install -r requirements-cluster.txt)")
    add_spec_options(c, SweepSpec, "fleet")
    o = p.add_argument_group("results")
    o.add_argument("--db", default=str(DEFAULT_DB), help="SQLite file that keeps every sweep")
    o.add_argument("--out", default=None, help="report folder (default results/sweep-<id>)")
    o.add_argument("--format", type=str_list, default=("md", "csv", "json", "html"), help="md,csv,json,html")
    o.add_argument("--resume", nargs="?", const="latest", default=None, metavar="SWEEP_ID",
                   help="finish an interrupted sweep (default: the latest one)")
    add_price_options(o)
    o.add_argument("--yes", action="store_true", help="run a grid larger than the safety limits")
    o.add_argument("--dry-run", action="store_true", help="print the grid and estimate, run nothing")
    h = p.add_argument_group("history (the same as the subcommands list, report, export, import and compare)")
    h.add_argument("--list", action="store_true", help="list the sweeps in --db")
    h.add_argument("--report", type=int, metavar="SWEEP_ID", help="write the reports of a stored sweep")
    h.add_argument("--export", metavar="PATH", help="write a portable JSON bundle")
    h.add_argument("--sweeps", type=int_list, default=None, help="sweep ids for --export (default all)")
    h.add_argument("--import", dest="import_", metavar="PATH", help="import a bundle from another machine")
    h.add_argument("--compare", type=int_list, metavar="IDS",
                   help="sweeps side by side (p50 latency), and each against the first with a 95%% interval")
    p.add_argument("-v", "--verbose", action="store_true")
    commands = p.add_subparsers(dest="command", title="commands", metavar="{serve,list,report,export,import,compare}")
    serve_cli.add_parser(commands)
    history_cli.add_parsers(commands)
    return p


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    bad = [f for f in args.format if f not in FORMATS]
    if bad:
        raise SpecError(f"unknown format {', '.join(bad)}: choose from {', '.join(FORMATS)}")
    return SweepSpec.from_choices(vars(args))


def parse_with_logging(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse a bench command line and log to stderr (INFO with -v), the same for every bench command."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_with_logging(parser, argv)
    try:
        if args.command == "serve":
            return serve_cli.run(args)
        done = history_cli.run(args)  # list, report, export, import, compare (as subcommands or the older flags)
        return _sweep(parser, args) if done is None else done
    except SpecError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("\ninterrupted: finished cells are kept; continue with --resume", file=sys.stderr)
        return 130
    return 0


def _sweep(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    resume_id = None
    if args.resume is not None:
        if args.resume == "latest":
            resume_id = resumable_sweep(args.db)
            if resume_id is None:
                print(f"nothing to resume in {args.db}", file=sys.stderr)
                return 1
        else:
            try:
                resume_id = int(args.resume)
            except ValueError:
                parser.error(f"--resume takes a sweep id, got {args.resume!r}")
        with Store(args.db) as store:
            sweep = store.sweep(resume_id)
        refusal = resume_refusal(sweep, resume_id, args.db)
        if refusal:
            parser.error(refusal)
        spec = SweepSpec.from_dict(sweep["spec"])
    else:
        spec = spec_from_args(args)
    try:
        confirmed = resume_id is not None or args.yes
        estimate = grid.estimate_grid(spec, args.db, resume_id) if confirmed else grid.refuse_huge_grid(spec, args.db)
    except SpecError as exc:  # not a mistake in the arguments: the estimate and how to confirm, no usage text
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(estimate.summary() + (" before resuming" if resume_id else ""), file=sys.stderr)
    if note := unused_settings(spec):
        print(f"warning: {note}", file=sys.stderr)
    busy = (load_average() or (0.0,))[0]
    if busy > 0.5 * usable_cores():
        print(f"warning: the machine is busy (load average {busy:.1f} on {usable_cores()} cores); timings will be "
              "noisy and multi-threaded cells suffer most", file=sys.stderr)
    if args.dry_run:
        if spec.cluster:
            print("(the rules are judged on this machine here; on the cluster each node judges its own cells)")
        for c in spec.expand():
            rule = cell_rule(c)
            print(f"{c.label}{'  -> ' + rule[0] + ': ' + rule[1] if rule else ''}")
        return 0
    return _run(spec, args, resume_id)


def _run(spec: SweepSpec, args: argparse.Namespace, resume_id: int | None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    progress, price = _Progress(args.db), price_from_args(args)
    final = None
    for event in run_sweep(None if resume_id else spec, args.db, resume=resume_id,
                           memory_allowance_mb=args.memory_allowance_mb):
        if isinstance(event, SweepStarted):
            save_price(args.db, event.sweep_id, price)
        if isinstance(event, SweepFinished):
            final = event
        else:
            progress.show(event)
    progress.close()
    out = args.out or str(Path(args.db).parent / f"sweep-{final.sweep_id}")
    history_cli.write_reports_of(args.db, final.sweep_id, out, args.format, print_table=True)
    print(f"sweep {final.sweep_id} {final.status}", file=sys.stderr)
    if any(r.status == "lost" for r in final.results):
        print("cells lost with their node are kept as `lost` rows; bring the node back and run --resume",
              file=sys.stderr)
    return 0 if final.status == "finished" else 1


def _interrupt(signum, frame):
    """SIGTERM ends the sweep like Ctrl-C: what was measured is kept, the sweep marked interrupted."""
    raise KeyboardInterrupt


class _Progress:
    """A running sweep on stderr: a progress bar over its cells, moved on by the runner's events."""

    def __init__(self, db: str):
        self.db, self.bar = db, None

    def show(self, event) -> None:
        if isinstance(event, SweepStarted):
            self._start(event)
            return
        bar = self.bar
        if isinstance(event, CellStarted):
            bar.set_description(event.config.label)
            bar.set_postfix_str(f"left ~{grid.describe(event.eta_s)}" if event.eta_s is not None else "left ?")
        elif isinstance(event, CellFinished):
            r = event.result
            if r.status != "cancelled":
                bar.update(1)
            if r.status != "ok":
                bar.write(f"{r.config.label}: {r.status}: {r.reason}")
        elif isinstance(event, SweepPlanned):
            bar.write(event.plan)
        elif isinstance(event, PassStarted):
            bar.set_description(f"pass {event.pass_no + 1} of {event.passes}")
            bar.set_postfix_str(f"0 of {len(event.order)} cells timed")
        elif isinstance(event, CallTimed):
            left = grid.describe(event.eta_s)
            bar.set_postfix_str(f"{event.timed} of {event.cells} cells timed, passes left ~{left}")
        elif isinstance(event, FidelityStarted):
            bar.set_description(f"fidelity of {event.engine} {event.precision} vs fp32 stock")
        elif isinstance(event, QualityStarted):
            bar.set_description(f"quality: {event.what}")
        elif isinstance(event, FidelityFinished) and event.record.get("status") != "ok":
            rec = event.record
            bar.write(f"fidelity {rec['engine']} {rec['precision']}: {rec['status']}: {rec.get('reason')}")

    def _start(self, event: SweepStarted) -> None:
        from tqdm import tqdm  # only a run draws a progress bar

        print(f"sweep {event.sweep_id}: {event.pending} of {event.total} cells to measure, db {self.db}",
              file=sys.stderr)
        for line in bandwidth_lines(event.environment):  # what every row's floor_step_ms divides by
            print(line, file=sys.stderr)
        self.bar = tqdm(total=event.total, initial=event.total - event.pending, unit="cell", file=sys.stderr,
                        dynamic_ncols=True, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} cells [{elapsed}{postfix}]")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


