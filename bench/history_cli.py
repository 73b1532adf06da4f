"""The history's verbs as `python -m bench` subcommands: what was measured, read back, carried and compared.

    python -m bench list                          # every sweep and serving run in --db
    python -m bench report 3 --format md,html     # a stored sweep's reports (and its table)
    python -m bench export bundle.json --sweeps 3,4   /   python -m bench import other-machine.json
    python -m bench compare 3,5                   # the same configurations on two sweeps side by side

The flags that did this before (--list, --report ID, --export PATH, --import PATH, --compare IDS) still work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.options import add_price_options, price_from_args
from chattts_lab.history.bundle import BundleError, export_bundle, import_bundle
from chattts_lab.history.compare import compare_sweeps, comparison_record
from chattts_lab.history.frames import compare_frame, sweeps_frame
from chattts_lab.history.price import MachinePrice, price_from_notes, with_cost
from chattts_lab.history.recommend import MOS_DROP, WER_RISE_PTS, precision_by_length
from chattts_lab.history.report import (FIDELITY_COLUMNS, FORMATS, comparison_lines, markdown_table, price_lines,
                                        results_frame, write_reports)
from chattts_lab.history.store import DEFAULT_DB, Store, save_price
from chattts_lab.options import argparse_type
from chattts_lab.sweep import grid
from chattts_lab.sweep.spec import SpecError, SweepSpec

int_list, str_list = argparse_type(grid.int_list), argparse_type(grid.str_list)
COMMANDS = ("list", "report", "export", "import", "compare")


def add_parsers(subparsers) -> None:
    """The history's subcommands. Their --db keeps a value given before the command (`--db X list`)."""
    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(name, help=help.replace("%", "%%"), description=help)  # help is %-formatted
        sub.add_argument("--db", default=argparse.SUPPRESS, help=f"SQLite file that keeps every sweep (default {DEFAULT_DB})")
        return sub

    command("list", "list the sweeps and serving runs kept in --db")
    report = command("report", "write the reports of a stored sweep, and print its table")
    report.add_argument("sweep_id", type=int, metavar="SWEEP_ID")
    report.add_argument("--out", default=None, help="report folder (default results/sweep-<id>)")
    report.add_argument("--format", type=str_list, default=("md", "csv", "json", "html"), help="md,csv,json,html")
    add_price_options(report)
    export = command("export", "write a portable JSON bundle of the history (or of --sweeps)")
    export.add_argument("path", metavar="PATH")
    export.add_argument("--sweeps", type=int_list, default=None, help="sweep ids (default all)")
    command("import", "import a bundle from another machine").add_argument("path", metavar="PATH")
    compare_ = command("compare", "sweeps side by side (p50 latency), each against the first with a 95% interval")
    compare_.add_argument("ids", type=int_list, metavar="IDS")


def run(args: argparse.Namespace) -> int:
    """A subcommand, or the older flag that means the same; None when the command line asks for neither."""
    command = args.command if args.command in COMMANDS else next(
        (name for name, flag in (("list", "list"), ("import", "import_"), ("export", "export"), ("compare", "compare"),
                                 ("report", "report")) if getattr(args, flag, None) not in (None, False)), None)
    if command is None:
        return None
    db = args.db
    if command == "list":
        return list_sweeps(db)
    if command == "import":
        return import_sweeps(db, args.path if args.command else args.import_)
    if command == "export":
        return export_sweeps(db, args.path if args.command else args.export, args.sweeps)
    if command == "compare":
        return compare(db, list(args.ids if args.command else args.compare))
    bad = [f for f in args.format if f not in FORMATS]
    if bad:
        raise SpecError(f"unknown format {', '.join(bad)}: choose from {', '.join(FORMATS)}")
    return write_reports_of(db, args.sweep_id if args.command else args.report, args.out, args.format,
                            price=price_from_args(args))


def write_reports_of(db: str, sweep_id: int, out: str | None, formats, print_table: bool = True,
           price: MachinePrice | None = None) -> int:
    """A stored sweep's reports (and its table on stdout); a price given is recorded for the sweep first."""
    with Store(db) as store:
        sweep = store.sweep(sweep_id)
        if sweep is None:
            print(f"no sweep {sweep_id} in {db}", file=sys.stderr)
            return 1
    save_price(db, sweep_id, price)
    with Store(db) as store:
        results = store.results(sweep_id)
        fidelity = store.fidelity(sweep_id)
        notes = store.notes(sweep_id)
    df = with_cost(results_frame(results), price_from_notes(notes))
    comparisons = comparison_record(results, notes, sweep["spec"].get("drift_threshold_pct", SweepSpec.drift_threshold_pct))
    meta = {k: sweep[k] for k in ("id", "uuid", "created_at", "status", "spec")}
    paths = write_reports(df, sweep["environment"], fidelity, out or str(Path(db).parent / f"sweep-{sweep_id}"),
                          formats, meta, comparisons)
    if print_table:
        print(markdown_table(df))
        print("\n" + "\n".join(f"- {line}" for line in price_lines(df) + comparison_lines(comparisons)))
        if fidelity:
            print("\nFidelity (drift from fp32 stock):\n" + markdown_table(pd.DataFrame(fidelity), FIDELITY_COLUMNS))
        for line in by_length_lines(df, (notes.get("quality") or {}).get("by_length") or []):
            print(line)
    for fmt, path in paths.items():
        print(f"wrote {path}", file=sys.stderr)
    return 0


def by_length_lines(df: pd.DataFrame, by_length: list[dict]) -> list[str]:
    """The measured precision-by-length policy, one line per text length (nothing without real quality rows)."""
    policy = precision_by_length(df, by_length)
    if not policy:
        return []
    lines = [f"\nPrecision by text length (fastest within {MOS_DROP:g} MOS and {WER_RISE_PTS:g} WER points of stock "
             "fp32 on that length's clips):"]
    for p in policy:
        lines.append(f"- {p['length']}: " + (f"{p['config'].replace('|', ' ')} (RTF {p['rtf']:.2f}, MOS "
                                           f"{p['quality_mos_delta']:+.2f}, WER {p['quality_wer_delta_pts']:+.1f} points)"
                                           if p["config"] else "none within the floor"))
    return lines


def list_sweeps(db: str) -> int:
    df = sweeps_frame(db)
    df["noisy"] = df["noisy"].map({True: "NOISY", False: "no"})  # blank: drift not checked (fewer than 2 passes)
    print(markdown_table(df, ("id", "created_at", "kind", "status", "origin", "machine", "model", "n_cells", "n_ok",
                              "drift_pct", "noisy", "usd_per_hour")))
    return 0


def export_sweeps(db: str, path: str, sweeps) -> int:
    try:
        out = export_bundle(db, path, list(sweeps) if sweeps else None)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}", file=sys.stderr)
    return 0


def import_sweeps(db: str, path: str) -> int:
    try:
        new, skipped = import_bundle(db, path)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"imported sweeps {new or 'none'}; already present: {len(skipped)}", file=sys.stderr)
    return 0


def compare(db: str, ids: list[int]) -> int:
    with Store(db) as store:
        missing = [i for i in ids if store.sweep(i) is None]
    if missing:
        print(f"error: no sweep {', '.join(map(str, missing))} in {db} (python -m bench list shows them)",
              file=sys.stderr)
        return 1
    df = compare_frame(db, ids)
    print(markdown_table(df, list(df.columns)))
    ratios = compare_sweeps(db, ids)
    if not ratios.empty:
        print("\n" + "\n".join(f"- {phrase}" for phrase in ratios["phrase"]))
    return 0
