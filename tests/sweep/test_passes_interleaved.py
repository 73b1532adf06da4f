"""Interleaved passes with real workers on tiny synthetic weights: structure and honesty, never timing.

Every cell's worker stays loaded between passes (same pid in every pass), each pass times each cell once
in a recorded random order, a cell's statistics come from all its passes and every raw pass is kept in the
store, the bundle and the JSON report; workers that do not fit in memory are reloaded and the plan says so;
a worker killed between its calls is a `crashed` row while the others finish; a stopped sweep resumes.
Real workers pay torch's and ChatTTS's import on busy cores, so each test starts as few as it can.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.support.cli import bench_here
from tests.support.fake_workers import running_workers
from chattts_lab.history.compare import speed_ratio, sweep_comparison
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.bundle import export_bundle
from chattts_lab.history.store import Store
from chattts_lab.sweep.runner import CellFinished, PassStarted, SweepFinished, SweepPlanned, run_sweep

TINY = dict(model="synthetic-tiny", tokens=(4,), threads=(1,), warmup=0, fidelity=False, passes=3)
TWO_CELLS = dict(TINY, precisions=("fp32", "bf16"))
ROOMY_MB = 1e6  # a memory allowance every worker fits in, whatever else the machine runs now


def timed(result) -> list[dict]:
    return [s for s in result.samples if s["phase"] == "timed"]


def workers() -> list[psutil.Process]:
    """This test's sweep workers, oldest first (the sweep loads them in grid order)."""
    return running_workers()


def test_each_cell_keeps_one_loaded_worker_and_every_pass_is_recorded(tmp_path, capsys):
    db = tmp_path / "lab.sqlite"
    events = list(run_sweep(SweepSpec(**TWO_CELLS), db, memory_allowance_mb=ROOMY_MB))
    final = events[-1]
    assert isinstance(final, SweepFinished) and final.status == "finished"
    plan = next(e.plan for e in events if isinstance(e, SweepPlanned))
    assert "3 interleaved passes over 2 cells" in plan and "stays loaded" in plan
    orders = [e.order for e in events if isinstance(e, PassStarted)]
    assert len(orders) == 3 and all(sorted(o) == [0, 1] for o in orders)
    assert all(a != b for a, b in zip(orders, orders[1:]))  # a fresh order each pass, never the same twice running

    for r in final.results:
        assert r.status == "ok" and r.passes == 3
        calls = timed(r)
        assert [s["pass"] for s in calls] == [0, 1, 2]
        assert len({s["worker_pid"] for s in r.samples}) == 1 == len(r.extra["worker_pids"])  # loaded once
        assert [s["phase"] for s in r.samples].count("cold") == 1
        assert r.latency.count == 3 and r.latency.p50 == sorted(s["wall_s"] for s in calls)[1]  # all passes count
        assert r.cpu_share is not None and r.cpu_share > 0
        index = ["fp32", "bf16"].index(r.config.precision)
        assert all(orders[s["pass"]][s["position"]] == index for s in calls)  # its place in each recorded order

    with Store(db) as store:
        notes = store.notes(final.sweep_id)
        assert notes["pass_orders"] == [list(o) for o in orders] and notes["plan"] == plan
        assert notes["drift"] == final.drift and final.drift["drift_pct"] is not None
        stored = store.results(final.sweep_id)
    assert [[s["pass"] for s in timed(r)] for r in stored] == [[0, 1, 2], [0, 1, 2]]

    bundle = json.loads(export_bundle(db, tmp_path / "b.json").read_text())["sweeps"][0]
    assert bundle["notes"]["pass_orders"] == notes["pass_orders"]
    assert [[s.get("pass") for s in c["samples"] if s["phase"] == "timed"] for c in bundle["cells"]] == [[0, 1, 2]] * 2

    comparisons = sweep_comparison(db, final.sweep_id)
    assert [sorted(p["wall_s_by_pass"]) for p in comparisons["passes"]] == [["0", "1", "2"]] * 2
    assert len(comparisons["ratios"]) == 1 and comparisons["ratios"][0]["paired"]
    out = tmp_path / "report"
    printed = bench_here(capsys, "--report", str(final.sweep_id), "--db", str(db), "--out", str(out),
                         "--format", "json,md").out
    report = json.loads((out / "results.json").read_text())
    assert report["comparisons"]["pass_orders"] == notes["pass_orders"]
    assert report["comparisons"]["passes"] == comparisons["passes"]
    assert "Drift across passes" in printed and "95% CI" in printed


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: the interleaving itself is the first test's
def test_workers_that_do_not_fit_are_reloaded_before_each_turn_and_the_plan_says_so(tmp_path):
    # Two passes are enough to see a worker reloaded for each (each reload costs a whole model load).
    events = list(run_sweep(SweepSpec(**dict(TWO_CELLS, passes=2)), tmp_path / "lab.sqlite", memory_allowance_mb=1))
    plan = next(e.plan for e in events if isinstance(e, SweepPlanned))
    assert "0 worker(s) stay loaded and 2 are loaded again" in plan and "never timed" in plan
    final = events[-1]
    assert final.status == "finished"
    for r in final.results:
        assert r.status == "ok" and r.passes == 2
        pids = [s["worker_pid"] for s in timed(r)]
        assert len(set(pids)) == 2  # a fresh worker for each pass
        assert set(pids) <= set(r.extra["worker_pids"])
        colds = [s["worker_pid"] for s in r.samples if s["phase"] == "cold"]
        assert set(pids) <= set(colds)  # each reloaded worker made its untimed cold call before its timed one


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: crashed rows: test_reliability_sweep's killed worker
def test_a_worker_killed_between_its_calls_is_a_crashed_row_and_the_others_finish(tmp_path):
    killed = None
    finished = []
    for event in run_sweep(SweepSpec(**TWO_CELLS), tmp_path / "lab.sqlite", memory_allowance_mb=ROOMY_MB):
        if isinstance(event, PassStarted) and event.pass_no == 1:  # the workers wait for their next command
            killed = workers()[0]  # fp32, the first loaded
            os.kill(killed.pid, signal.SIGKILL)
        if isinstance(event, CellFinished):
            finished.append(event.result)
        final = event
    assert [(r.config.precision, r.status) for r in finished] == [("fp32", "crashed"), ("bf16", "ok")]
    crashed, ok = finished
    assert "SIGKILL" in crashed.reason and [s["pass"] for s in timed(crashed)] == [0]  # its first pass is kept
    assert ok.passes == 3
    assert final.status == "finished"
    assert not psutil.pid_exists(killed.pid) or killed.status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: resume: test_bench_cli's killed sweep
def test_a_stopped_interleaved_sweep_keeps_its_cells_as_cancelled_and_resumes(tmp_path):
    db = tmp_path / "lab.sqlite"
    stop = []
    for event in run_sweep(SweepSpec(**TWO_CELLS), db, should_stop=lambda: bool(stop), memory_allowance_mb=ROOMY_MB):
        if isinstance(event, PassStarted) and event.pass_no == 1:
            stop.append(True)
        final = event
    assert final.status == "cancelled"
    assert [r.status for r in final.results] == ["cancelled", "cancelled"]
    assert all(len(timed(r)) == 1 for r in final.results)  # the pass each had finished is kept with it
    assert not workers()  # no worker left behind
    resumed = list(run_sweep(None, db, resume=final.sweep_id))[-1]
    assert resumed.status == "finished" and [r.status for r in resumed.results] == ["ok", "ok"]
    assert all(r.passes == 3 for r in resumed.results)


def test_the_independent_check_runs_interleaved_with_the_sweeps_cell_and_gives_the_ratio():
    run = subprocess.run([sys.executable, "-m", "bench.independent", "--model", "synthetic-tiny", "--threads", "1",
                          "--tokens", "4", "--warmup", "0", "--interleave", "2"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert [sorted(o) for o in out["orders"]] == [["independent", "sweep_cell"]] * 2
    assert len(out["independent_walls_s"]) == len(out["sweep_cell_walls_s"]) == 2
    # the ratio and its interval are those of the raw walls it reports, paired by pass
    assert out["ratio"] == speed_ratio(out["sweep_cell_walls_s"], out["independent_walls_s"], paired=True).as_dict()
    assert out["ratio"]["paired"] and 0 < out["ratio"]["ci_low"] <= out["ratio"]["ci_high"]
    assert "the sweep cell" in out["phrase"] and "95% CI" in out["phrase"]
    assert not workers()  # the sweep's worker was closed


@pytest.mark.slow
def test_an_injected_cpu_load_half_way_marks_the_sweep_noisy(tmp_path):
    """Opt-in (-m slow): a CPU-bound process on every core from the second pass on must show as drift."""
    spec = SweepSpec(**{**TWO_CELLS, "tokens": (64,), "passes": 4})
    hogs = []
    try:
        for event in run_sweep(spec, tmp_path / "lab.sqlite"):
            if isinstance(event, PassStarted) and event.pass_no == 2 and not hogs:
                code = "while True: pass"
                hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(psutil.cpu_count())]
            final = event
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert final.drift["noisy"] and final.drift["drift_pct"] > 5
