"""The grid in the library: list and range syntax, the size refusal, and time estimates from this machine's
own history (a real SQLite file) or, without one, from the README's measured tables."""

import pytest

from chattts_lab.sweep import grid
from chattts_lab.sweep.grid import SpecError, describe, estimate_cell_s, estimate_grid, int_list, refuse_huge_grid
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.trackers.stats import Latency
from chattts_lab.history.store import Store

# ------------------------------------------------------------------------------------------------
# Syntax (README: "integer ranges too: 1-8, 1-8+2, 1-16*2")


@pytest.mark.parametrize("text, values", [
    ("1,4,8", (1, 4, 8)),
    ("1-4", (1, 2, 3, 4)),
    ("1-8+2", (1, 3, 5, 7)),
    ("1-16*2", (1, 2, 4, 8, 16)),
    ("2-20*3", (2, 6, 18)),
    ("1, 8-9 ,32", (1, 8, 9, 32)),
])
def test_int_lists_and_ranges(text, values):
    assert int_list(text) == values


@pytest.mark.parametrize("text, message", [
    ("x", "'x' is not a whole number"),
    ("8-1", "bad range '8-1'"),
    ("1-16*1", "bad range '1-16\\*1'"),
    ("0-16*2", "bad range '0-16\\*2'"),
    ("1-8+0", "bad range '1-8\\+0'"),
    (" , ", "empty list"),
])
def test_bad_lists_are_a_spec_error_saying_what_is_wrong(text, message):
    with pytest.raises(SpecError, match=message):
        int_list(text)


def test_on_off_lists():
    assert grid.bool_list("off,on") == (False, True)
    assert grid.bool_list("1, no") == (True, False)
    with pytest.raises(SpecError, match="'maybe' is not on or off"):
        grid.bool_list("on,maybe")


def test_durations_read_as_people_read_them():
    assert (describe(45), describe(750), describe(3 * 3600)) == ("45 s", "12.5 min", "3.0 h")


# ------------------------------------------------------------------------------------------------
# The size limit: one refusal, in the library


def test_a_huge_grid_is_refused_by_the_library_with_its_size_and_estimate(tmp_path):
    huge = SweepSpec(model="synthetic", precisions=("fp32", "bf16", "fp16", "int8"), batches=int_list("1-64"),
                     tokens=(2048,))
    db = tmp_path / "never-created.sqlite"
    with pytest.raises(SpecError, match=r"refusing a grid of 256 cells / about [\d.]+ h .*--yes"):
        refuse_huge_grid(huge, db)
    long = SweepSpec(model="synthetic", tokens=(2048,), repeats=10_000, max_repeats=10_000)  # 1 cell, many hours
    with pytest.raises(SpecError, match="refusing a grid of 1 cells"):
        refuse_huge_grid(long, db)
    small = refuse_huge_grid(SweepSpec(model="synthetic-tiny", tokens=(8,)), db)
    assert (small.cells, small.too_large) == (1, False)
    assert not db.exists()  # estimating reads a store, never creates one


# ------------------------------------------------------------------------------------------------
# Estimates without history: the README's measured GPT ms/step (full-size synthetic weights, 2 cores, N=128)

README_STEP_MS = [  # engine, precision, batch, threads, measured ms per step (README "Measured" tables)
    ("stock", "fp32", 1, 1, 117.2), ("stock", "fp32", 4, 1, 255.5), ("stock", "fp32", 8, 1, 323.1),
    ("stock", "fp32", 1, 2, 127.2), ("stock", "fp32", 4, 2, 299.1), ("stock", "fp32", 8, 2, 302.0),
    ("stock", "bf16", 1, 1, 103.3), ("stock", "bf16", 4, 1, 258.2), ("stock", "bf16", 8, 1, 473.4),
    ("stock", "bf16", 1, 2, 66.0), ("stock", "bf16", 4, 2, 167.0), ("stock", "bf16", 8, 2, 288.0),
    ("stock", "int8", 1, 1, 60.8), ("stock", "int8", 4, 1, 86.1), ("stock", "int8", 8, 1, 126.4),
    ("stock", "int8", 1, 2, 52.9), ("stock", "int8", 4, 2, 73.0), ("stock", "int8", 8, 2, 102.6),
    ("lab", "fp32", 1, 2, 98.1), ("lab", "int8", 1, 2, 25.3), ("lab", "int8", 8, 2, 49.6),
]


@pytest.mark.parametrize("engine, precision, batch, threads, measured", README_STEP_MS)
def test_without_history_step_times_agree_with_the_readme_tables(engine, precision, batch, threads, measured):
    cfg = RunConfig("synthetic", "cpu", precision, batch, threads, 128, engine)
    step_ms, _ = grid.step_ms_and_overhead(cfg, [])
    assert measured / 1.5 <= step_ms <= measured * 1.5


def test_without_history_the_readme_example_sweep_is_estimated_near_the_hour_it_took(tmp_path):
    """README: that 18-cell sweep took "about an hour" on the build machine."""
    spec = SweepSpec(model="synthetic", precisions=("fp32", "bf16", "int8"), batches=(1, 4, 8), threads=(1, 2),
                     tokens=(128,), repeats=3)
    estimate = estimate_grid(spec, tmp_path / "none.sqlite")
    if estimate.ruled:
        pytest.skip("this machine has fewer than 2 usable cores: the 2-thread cells are skipped by rule")
    assert not estimate.from_history and "README's reference machine" in estimate.summary()
    assert 30 * 60 <= estimate.seconds <= 90 * 60


# ------------------------------------------------------------------------------------------------
# Estimates from this machine's history


def _measured(cfg: RunConfig, step_ms: float, calls_s: list[float], elapsed_s: float) -> CellResult:
    samples = tuple({"phase": "timed", "wall_s": w} for w in calls_s)
    return CellResult(cfg, "ok", latency=Latency.from_values(calls_s), step_ms=step_ms, samples=samples,
                      elapsed_s=elapsed_s)


def _history_db(path, cells, origin="local"):
    with Store(path) as store:
        sid = store.create_sweep({}, {"hostname": "here"}, status="finished", origin=origin)
        for i, cell in enumerate(cells):
            store.add_cell(sid, i, cell)
    return path


def tiny(precision="fp32", batch=1, threads=1, engine="stock", tokens=8):
    return RunConfig("synthetic-tiny", "cpu", precision, batch, threads, tokens, engine, warmup=0, repeats=2,
                     min_time_s=0.0)


def test_history_gives_the_measured_step_time_and_overhead_of_the_same_configuration(tmp_path):
    db = _history_db(tmp_path / "lab.sqlite", [
        _measured(tiny(), step_ms=10.0, calls_s=[0.5, 0.25, 0.25], elapsed_s=21.0),  # 20 s of it outside the calls
        _measured(tiny(batch=4), step_ms=30.0, calls_s=[1.0], elapsed_s=11.0),
    ])
    history = grid.machine_history(db)
    assert grid.step_ms_and_overhead(tiny(), history) == (10.0, 20.0)
    assert grid.step_ms_and_overhead(tiny(batch=4), history) == (30.0, 10.0)
    # an untried precision: the measured cell scaled by the README's int8/fp32 ratio (56 / 122 ms at batch 1)
    step_ms, overhead_s = grid.step_ms_and_overhead(tiny(precision="int8"), history)
    assert step_ms == pytest.approx(10.0 * 56 / 122) and overhead_s == 20.0
    estimate = estimate_grid(SweepSpec(model="synthetic-tiny", tokens=(8,), fidelity=False), db)
    assert estimate.from_history and "this machine's past sweeps" in estimate.summary()


def test_history_changes_the_estimate_and_only_this_machines_cells_count(tmp_path):
    cfg = tiny()
    without = estimate_cell_s(cfg, [])
    slow = _measured(cfg, step_ms=500.0, calls_s=[4.0], elapsed_s=64.0)
    assert estimate_cell_s(cfg, grid.machine_history(_history_db(tmp_path / "a.sqlite", [slow]))) > 3 * without
    imported = grid.machine_history(_history_db(tmp_path / "b.sqlite", [slow], origin="imported"))
    assert imported == [] and estimate_cell_s(cfg, imported) == without  # measured elsewhere: not this machine
    other_model = grid.machine_history(_history_db(tmp_path / "c.sqlite", [
        _measured(RunConfig("synthetic", "cpu", "fp32", 1, 1, 8), step_ms=500.0, calls_s=[4.0], elapsed_s=64.0)]))
    assert estimate_cell_s(cfg, other_model) == without  # full-size weights say nothing about the tiny ones


def test_failed_cells_are_not_history(tmp_path):
    db = _history_db(tmp_path / "lab.sqlite", [CellResult(tiny(), "error", "boom", elapsed_s=5.0),
                                               CellResult(tiny(batch=2), "oom", "too big", elapsed_s=5.0)])
    assert grid.machine_history(db) == []


def test_rule_rows_cost_nothing():
    assert estimate_cell_s(tiny(precision="int4")) == 0.0  # a lab-only precision asked of stock: no process runs
