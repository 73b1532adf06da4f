"""Close the sweep scripts/gpu/sweep.sh ran against its deadline, export its bundle and print a short table.

    PYTHONPATH=. python scripts/gpu/finish_sweep.py DB BUNDLE.json [--machine machine.json]

- Every cell of the grid the deadline left without a row gets one: the rule table's reason where the cell could
  not run here anyway, else a `cancelled` row saying the deadline came first (a bundle that only lacked them would
  not tell a reader whether they failed or never ran; `--resume` measures them again).
- What scripts/gpu/prepare_machine.py found (versions, the independent bandwidth check) is kept with the sweep as the
  note `device_check`, so it travels in the bundle.
- The table is short on purpose: the device call's reply shows only the end of the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chattts_lab.sweep.results import CellResult
from chattts_lab.sweep.spec import SweepSpec, cell_rule
from chattts_lab.history.bundle import export_bundle
from chattts_lab.history.store import Store

NOT_REACHED = "not measured: the device call's time budget (scripts/gpu/sweep.sh) ran out before this cell finished"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu/finish_sweep.py")
    p.add_argument("db")
    p.add_argument("bundle")
    p.add_argument("--machine", help="prepare_machine.py's JSON, kept as the sweep's note `device_check`")
    args = p.parse_args(argv)
    with Store(args.db) as store:
        sweeps = store.sweeps_list()
        if not sweeps:
            print(f"no sweep in {args.db}: the sweep did not start (see the log above)", file=sys.stderr)
            return 1
        sweep_id = sweeps[0]["id"]  # the newest: sweep.sh starts from an empty store
        store.mark_dead_sweeps()  # a sweep killed past its deadline's grace is left `running`
        status = store.sweep(sweep_id)["status"]
        added = add_rows_not_reached(store, sweep_id) if status != "finished" else 0  # a finished one has every row
        check = device_check(Path(args.machine)) if args.machine else None
        if check is not None:
            store.set_note(sweep_id, "device_check", check)
        print(short_table(store.results(sweep_id, with_samples=False)))
        print(bandwidth_line(store.sweep(sweep_id)["environment"], check or {}))
        print(f"sweep {sweep_id} {status}"
              + (f"; {added} cell(s) not reached, kept as cancelled rows" if added else ""))
    export_bundle(args.db, args.bundle, [sweep_id])
    return 0


def add_rows_not_reached(store: Store, sweep_id: int) -> int:
    """A row for every cell of the sweep's grid that has none: the rule table's where it rules the cell out (it
    needed no time), else `cancelled`. Returns how many are `cancelled`."""
    have = {r.config.key for r in store.results(sweep_id, with_samples=False)}
    spec = SweepSpec.from_dict(store.sweep(sweep_id)["spec"])
    cancelled = 0
    for index, cfg in enumerate(spec.expand()):
        if cfg.key in have:
            continue
        ruled = cell_rule(cfg)
        store.add_cell(sweep_id, index, CellResult(cfg, *ruled) if ruled else CellResult(cfg, "cancelled", NOT_REACHED))
        cancelled += not ruled
    return cancelled


def device_check(path: Path) -> dict:
    """prepare_machine.py's report, or why there is none (it failed or hit its time limit)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"status": "error", "reason": f"scripts/gpu/prepare_machine.py left no report ({exc})"}


def bandwidth_line(environment: dict, check: dict) -> str:
    """The sweep's read bandwidth beside the independent check's (the issue asks them to agree within 15 %)."""
    sweep = ", ".join(f"{d} {g:.0f} GB/s" for d, g in (environment.get("mem_read_gbps") or {}).items()) or "none"
    other = check.get("bandwidth", {})
    if other.get("status") != "ok":
        return f"read bandwidth: the sweep's {sweep}; no independent check ({other.get('reason', 'not run')})"
    return (f"read bandwidth: the sweep's {sweep}; independent {other['read_gbps']:.0f} GB/s "
            f"(copy {other['copy_gbps_read_plus_written']:.0f} GB/s read plus written)")


def short_table(results: list[CellResult]) -> str:
    lines = [f"{'engine':6} {'prec':4} {'batch':>5} {'status':11} {'step ms':>8} {'steps/s':>8} {'roofline':>8} "
             f"{'audio s/s':>9}  reason"]
    for r in results:
        row, c = r.row(), r.config
        steps = 1000 / r.step_ms if r.step_ms else None
        lines.append(f"{c.engine:6} {c.precision:4} {c.batch_size:5d} {r.status:11} {_num(r.step_ms):>8} "
                     f"{_num(steps):>8} {_num(row['roofline']):>8} {_num(r.audio_s_per_s):>9}  {r.reason[:70]}")
    return "\n".join(lines)


def _num(value) -> str:
    return "" if value is None else f"{value:.3g}"


if __name__ == "__main__":
    sys.exit(main())
