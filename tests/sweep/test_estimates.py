"""Estimates from what a cell really costs: `--dry-run` against the run it predicts, on tiny weights.

An interleaved cell's worker stays loaded while the other cells are timed; that wait is theirs, not its own, so
a row's `elapsed_s` (and the estimate made from it) is the worker's own work. Cells the rules stop, cells a
resumed sweep has, and fidelity checks of pairs that never run cost nothing.
"""

from __future__ import annotations

import io
import time
from contextlib import redirect_stderr
from dataclasses import replace

import pytest

from bench.cli import build_parser, main
from chattts_lab.sweep import grid, launcher, supervisor
from chattts_lab.trackers.env import usable_cores
from chattts_lab.sweep.results import CellResult, Latency, RunConfig
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.store import Store
from chattts_lab.sweep.runner import FidelityFinished, FidelityStarted, run_sweep

# Two cells in two interleaved passes (each worker's lifetime is most of the sweep: counted as its cost, as rows did
# before, their sum came to about 1.6x the sweep)
GRID = ["--model", "synthetic-tiny", "--tokens", "8", "--batch", "1,2", "--threads", "1", "--passes", "2",
        "--fidelity", "off", "--format", "md"]
SPEC = SweepSpec(model="synthetic-tiny", tokens=(8,), batches=(1, 2), threads=(1,), passes=2, fidelity=False)


def _within(a: float, b: float, factor: float) -> bool:
    return b / factor <= a <= b * factor


def quick_preset_spec() -> SweepSpec:
    """The quick preset as the app builds it (its engines, batch 1, warm-up, interleaved passes), at 8 tokens and fp32
    only: two cells, stock and lab."""
    from webui.benchmark.sweep_form import quick_form, spec_from_form

    return replace(spec_from_form("synthetic-tiny", quick_form(), None), precisions=("fp32",), tokens=(8,))


def argv_of(spec: SweepSpec) -> list[str]:
    return ["--model", spec.model, "--engine", ",".join(spec.engines), "--precision", ",".join(spec.precisions),
            "--batch", "1", "--tokens", "8", "--repeats", str(spec.repeats), "--warmup", str(spec.warmup),
            "--min-time", "0", "--fidelity", "off", "--passes", str(spec.passes), "--format", "md"]


def start_the_fork_server() -> None:
    """Started apart, before the sweep is timed: the dry run after it leaves the server's start out (this process has
    one by then: launcher.server_started()), so the sweep it is judged against must too, whichever test of this
    process ran a sweep first."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervisor, "WORKER_ENTRY", "tests.support.fake_workers:threads_and_parent")
        assert supervisor.run_child({"kind": "cell"}, timeout_s=300).status == "ok"
    assert launcher.server_started()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One real run of the quick preset's two cells from the command line: (its history, its seconds, its progress)
    for the tests below, which each judge it in their own way."""
    spec = quick_preset_spec()
    assert SweepSpec.from_choices(vars(build_parser().parse_args(argv_of(spec)))) == spec  # the app's very sweep
    folder = tmp_path_factory.mktemp("quick")
    db, progress = folder / "lab.sqlite", io.StringIO()
    start_the_fork_server()
    t0 = time.perf_counter()
    with redirect_stderr(progress):
        assert main(argv_of(spec) + ["--db", str(db), "--out", str(folder / "out")]) == 0
    return spec, db, time.perf_counter() - t0, progress.getvalue()


def test_dry_run_after_an_interleaved_sweep_is_within_1_5x_of_that_sweep(quick_run, capsys):
    """The estimate is a function of the rows in the history; judged against the very sweep those rows come from,
    it is checked without the drift of a shared machine's speed from one sweep to the next (which no estimate can
    know)."""
    spec, db, took, progress = quick_run
    passes = spec.interleaved_passes(2)
    # the bar counts the cells each pass times, not only cells that ended
    assert f"pass 1 of {passes}" in progress and "1 of 2 cells timed, passes left ~" in progress
    assert f"pass {passes} of {passes}" in progress and "2 of 2 cells timed, passes left ~0 s" in progress
    rows = Store(db).results(1)
    assert all(r.extra.get("worker_busy_s") for r in rows)
    # One worker works at a time (the others wait for their turn), so the cells' own work fits in the sweep's time.
    assert sum(r.elapsed_s for r in rows) < took
    assert main(argv_of(spec) + ["--db", str(db), "--dry-run"]) == 0
    predicted = grid.estimate_grid(spec, db).seconds
    assert f"roughly {grid.describe(predicted)} (estimated from this machine's past sweeps" in capsys.readouterr().err
    own = sum(r.elapsed_s for r in rows)
    print(f"estimated {predicted:.1f} s for a sweep that took {took:.1f} s, its cells {own:.1f} s")
    assert _within(predicted, took, 1.5), (predicted, took)


@pytest.mark.slow
def test_dry_run_predicts_the_next_run_within_1_5x_on_a_steady_machine(tmp_path, capsys):
    """The dry-run against the run that follows it (two sweeps: minutes on a loaded machine, hence slow)."""
    history, run_db = tmp_path / "history.sqlite", tmp_path / "run.sqlite"
    assert main(GRID + ["--db", str(history), "--out", str(tmp_path / "h")]) == 0
    predicted = grid.estimate_grid(SPEC, history).seconds
    t0 = time.perf_counter()
    assert main(GRID + ["--db", str(run_db), "--out", str(tmp_path / "r")]) == 0
    took = time.perf_counter() - t0
    # How far the machine's speed moved between the two sweeps: the same estimate made from each sweep's rows.
    moved = max(predicted, from_run := grid.estimate_grid(SPEC, run_db).seconds) / min(predicted, from_run)
    print(f"estimated {predicted:.1f} s, took {took:.1f} s; the machine's speed moved {moved:.2f}x between sweeps")
    assert _within(predicted, took, 1.5 * moved), (predicted, took, moved)


def _row(cfg: RunConfig, elapsed_s: float, calls_s: list[float], extra: dict, passes: int) -> CellResult:
    samples = tuple({"phase": "timed", "wall_s": w} for w in calls_s)
    return CellResult(cfg, "ok", latency=Latency.from_values(calls_s), step_ms=10.0, samples=samples,
                      elapsed_s=elapsed_s, extra=extra, passes=passes)


def _store(path, rows) -> str:
    with Store(path) as store:
        sid = store.create_sweep(SweepSpec(model="synthetic-tiny").to_dict(), {"hostname": "here"}, status="finished")
        for i, row in enumerate(rows):
            store.add_cell(sid, i, row)
    return str(path)


def test_an_interleaved_row_costs_its_workers_own_work_and_older_rows_their_step_only(tmp_path):
    cfg = RunConfig("synthetic-tiny", "cpu", "fp32", 1, 1, 8)
    own = _row(cfg, elapsed_s=12.0, calls_s=[1.0, 1.0], extra={"worker_busy_s": [12.0]}, passes=2)
    history = grid.machine_history(_store(tmp_path / "new.sqlite", [own]))
    assert history[0].overhead_s == pytest.approx(10.0)
    # written before the workers' own work was kept: 300 s is the worker's lifetime, mostly waits for other cells
    lifetime = _row(cfg, elapsed_s=300.0, calls_s=[1.0, 1.0], extra={}, passes=2)
    old = grid.machine_history(_store(tmp_path / "old.sqlite", [lifetime]))
    assert old[0].overhead_s is None and old[0].step_ms == 10.0
    assert grid.step_ms_and_overhead(cfg, old)[1] == grid._reference_overhead_s(cfg)
    one_pass = _row(cfg, elapsed_s=30.0, calls_s=[1.0, 1.0], extra={}, passes=0)  # a process of its own: all its
    assert grid.machine_history(_store(tmp_path / "one.sqlite", [one_pass]))[0].overhead_s == pytest.approx(28.0)


def test_bandwidth_reads_are_counted_at_what_this_machines_sweeps_timed_them(tmp_path):
    """Before any sweep here a read costs the reference machine's READ_BANDWIDTH_S; after, the mean of the reads
    this machine's own sweeps timed (a bundle's imported sweeps ran elsewhere and count for nothing)."""
    spec = SweepSpec(model="synthetic-tiny", precisions=("int8",), threads=(usable_cores() + 1,), tokens=(8,),
                     fidelity=False)  # a ruled cell: the estimate is its sweep's one read at the start
    db = tmp_path / "lab.sqlite"
    assert grid.read_s_here(db) == grid.estimate_grid(spec, db).seconds == grid.READ_BANDWIDTH_S
    with Store(db) as store:
        store.create_sweep({}, {"mem_read_s": [1.5, 0.5, 0.4]})
        store.create_sweep({}, {"mem_read_s": [0.6]})
        store.create_sweep({}, {"mem_read_s": [90.0]}, origin="imported")
    assert grid.read_s_here(db) == grid.estimate_grid(spec, db).seconds == pytest.approx(0.75)


def test_a_grid_whose_every_cell_is_skipped_costs_next_to_nothing_and_starts_no_fidelity(tmp_path):
    spec = SweepSpec(model="synthetic-tiny", precisions=("int8", "fp32"), threads=(usable_cores() + 1,),
                     tokens=(8,), fidelity=True)
    estimate = grid.estimate_grid(spec, tmp_path / "none.sqlite")
    assert estimate.ruled == estimate.cells == 2
    assert estimate.seconds == grid.READ_BANDWIDTH_S  # the sweep's one bandwidth read at its start, no process
    events = list(run_sweep(spec, tmp_path / "lab.sqlite"))
    assert not any(isinstance(e, FidelityStarted) for e in events)
    int8 = [e.record for e in events if isinstance(e, FidelityFinished) and e.record["precision"] == "int8"]
    assert int8[0]["status"] == "skipped" and "no cell of this device, engine and precision ran" in int8[0]["reason"]


def test_a_resumed_sweep_is_estimated_for_the_cells_it_still_has_to_measure(tmp_path, monkeypatch):
    spec = SweepSpec(model="synthetic-tiny", batches=(1, 2), tokens=(8,), threads=(1,), fidelity=False)
    first, second = spec.expand()
    db = _store(tmp_path / "lab.sqlite", [_row(first, 12.0, [1.0], {}, 0)])
    monkeypatch.setattr(launcher, "_started", False)  # a fresh process (the suite's may have started its server)
    whole, rest = grid.estimate_grid(spec, db), grid.estimate_grid(spec, db, resume=1)
    assert rest.done == 1 and "1 measured already" in rest.summary()
    # its one cell, the bandwidth read before it (a resumed sweep reads before each cell) and the start of the server
    # its worker is forked from (chattts_lab.sweep.launcher)
    cell = grid.estimate_cell_s(second, grid.machine_history(db)) + grid.READ_BANDWIDTH_S
    assert rest.seconds == pytest.approx(cell + grid.SERVER_START_S)
    assert whole.seconds > rest.seconds
    monkeypatch.setattr(launcher, "_started", True)  # a process whose server runs (an app's second sweep)
    assert grid.estimate_grid(spec, db, resume=1).seconds == pytest.approx(cell)


def test_the_quick_preset_is_estimated_from_what_its_run_measures(quick_run):
    """The quick preset as the app builds it, two of its cells at 8 tokens, against a real run, without the
    machine's speed: the calls and bandwidth reads the estimate counts are the ones the run made, and rebuilt from
    the run's own step times and process overheads (what the estimate is made of), its cells come within 25 % of
    their own work. The reference figures used before any history are one machine's, so the wall time of a run
    elsewhere is not compared (README: the quick preset, measured)."""
    spec, db, _, _ = quick_run
    with Store(db) as store:
        rows, environment = store.results(1), store.sweep(1)["environment"]
    assert [r.status for r in rows] == ["ok", "ok"]
    passes = spec.interleaved_passes(len(rows))
    assert passes == spec.passes > 1
    for row in rows:  # a cold call, the warm-up, one untimed call once all are loaded, then one timed call a pass
        phases = [s["phase"] for s in row.samples]
        assert phases.count("cold") == 1 and phases.count("timed") == passes, phases
        assert len(phases) == 1 + spec.warmup + 1 + passes, phases
    reads = grid._bandwidth_reads(spec, len(rows), passes, False)
    assert len(environment["mem_read_gbps_reads"]["cpu"]) == len(environment["mem_read_s"]) == reads  # each timed
    history = grid.machine_history(db)
    estimated = sum(grid.estimate_cell_s(r.config, history, passes) for r in rows)
    measured = sum(r.elapsed_s for r in rows)
    print(f"cells estimated {estimated:.1f} s from the run's own figures, measured {measured:.1f} s")
    assert _within(estimated, measured, 1.25), (estimated, measured)
