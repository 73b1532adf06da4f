"""Sweep specs: cartesian expansion, validation, the skip rules, derived statistics, and the parent's
handling of worker processes that die, hang or are stopped."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chattts_lab import metrics
from chattts_lab.trackers.env import usable_cores
from chattts_lab.sweep.results import CANONICAL_COLUMNS, RunConfig, summarize
from chattts_lab.sweep.spec import SpecError, SweepSpec, cell_rule
from chattts_lab.sweep import supervisor
from chattts_lab.sweep.supervisor import run_child

ISSUE_KEYS = ("device precision batch_size threads tokens engine compile stream status reason latency_p50_s "
              "latency_p90_s latency_std_s rtf audio_s_per_s tokens_per_s step_ms ttfa_s peak_rss_mb peak_device_mb "
              "load_s audio_s").split()


def test_expansion_is_the_cartesian_product_in_a_stable_order():
    spec = SweepSpec(model="synthetic-tiny", precisions=("fp32", "bf16", "int8"), batches=(1, 4, 8),
                     threads=(1, 2), tokens=(64, 256))
    cells = spec.expand()
    assert len(cells) == 3 * 3 * 2 * 2
    assert len({c.key for c in cells}) == len(cells)
    assert [c.batch_size for c in cells[:3]] == [1, 4, 8]  # the last list varies fastest
    assert (cells[0].precision, cells[-1].precision) == ("fp32", "int8")
    assert spec.expand() == cells


def test_duplicates_in_a_list_do_not_duplicate_cells():
    assert len(SweepSpec(batches=(1, 1, 2)).expand()) == 2


@pytest.mark.parametrize("changes, message", [
    (dict(batches=(0,)), "batch size"),
    (dict(precisions=("fp64",)), "unknown precision"),
    (dict(threads=(0,)), "threads"),
    (dict(tokens=(1,)), "tokens"),
    (dict(devices=("gpu",)), "unknown device"),
    (dict(engines=("fast",)), "unknown engine"),
    (dict(batches=()), "batches is empty"),
    (dict(repeats=0), "repeats"),
])
def test_invalid_specs_are_refused_with_a_reason(changes, message):
    spec = SweepSpec(**changes)
    assert any(message in e for e in spec.errors())
    with pytest.raises(SpecError, match=message):
        spec.expand()


def _cfg(**kw):
    base = dict(model="synthetic-tiny", device="cpu", precision="fp32", batch_size=1, threads=1, tokens=8)
    return RunConfig(**{**base, **kw})


def test_rule_table_turns_impossible_cells_into_rows_with_reasons():
    assert cell_rule(_cfg()) is None
    status, reason = cell_rule(_cfg(precision="int4"))  # a lab-only precision asked of the stock engine
    assert status == "unsupported" and "int4" in reason and "stock" in reason
    status, reason = cell_rule(_cfg(compile=True))
    assert status == "skipped" and "ignores compile" in reason
    status, reason = cell_rule(_cfg(threads=usable_cores() + 1))
    assert status == "skipped" and "usable cores" in reason


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_absent_device_is_skipped_not_fatal():
    status, reason = cell_rule(_cfg(device="cuda:0"))
    assert status == "skipped" and "not present" in reason


def test_statistics_and_metrics_are_derived_from_raw_samples():
    cfg = _cfg(batch_size=4, tokens=10)
    audio = metrics.audio_seconds(10)
    samples = [{"phase": "cold", "wall_s": 9.0}, {"phase": "warmup", "wall_s": 5.0}] + [
        {"phase": "timed", "wall_s": w, "decode_s": w / 2, "gpt_steps": 10, "audio_s": audio, "peak_rss_mb": m,
         "tokens": [10] * 4, "ttfa_s": None, "peak_device_mb": None}
        for w, m in ((1.0, 100.0), (3.0, 300.0), (2.0, 200.0))]
    r = summarize(cfg, "ok", "", {"samples": samples, "load_s": 1.5})
    assert r.latency.count == 3 and r.latency.p50 == 2.0  # warm-up and cold calls are not counted
    assert r.cold_s == 9.0 and r.load_s == 1.5
    assert r.rtf == pytest.approx(2.0 / audio)
    assert r.audio_s_per_s == pytest.approx(4 * audio / 2.0)
    assert r.tokens_per_s == pytest.approx(40 / 2.0)
    assert r.step_ms == pytest.approx(1000 * 1.0 / 9)  # median decode 1.0 s over 9 decode steps
    assert r.peak_rss_mb == 300.0
    row = r.row()
    assert set(ISSUE_KEYS) <= set(row) and tuple(row) == CANONICAL_COLUMNS


def test_ok_without_timed_samples_is_an_error():
    r = summarize(_cfg(), "ok", "", {"samples": [{"phase": "cold", "wall_s": 1.0}]})
    assert r.status == "error" and r.latency is None


@pytest.fixture
def fake_worker(monkeypatch):
    """Make the sweep's workers a stand-in from tests/support/fake_workers.py that dies or hangs on purpose."""
    def use(name: str) -> None:
        monkeypatch.setattr(supervisor, "WORKER_ENTRY", f"tests.support.fake_workers:{name}")
    return use


def test_a_worker_killed_by_a_signal_becomes_a_crashed_row(fake_worker):
    fake_worker("dying")
    out = run_child({"kind": "cell"}, timeout_s=30)
    assert out.status == "crashed" and "SIGKILL" in out.reason and "dying" in out.reason


def test_a_hung_worker_is_killed_at_the_timeout(fake_worker):
    fake_worker("hanging")
    out = run_child({"kind": "cell"}, timeout_s=1.0)
    # `timeout`, not `crashed`: the fix is a larger --timeout, not a bug report
    assert out.status == "timeout" and "timeout" in out.reason
    assert 1.0 <= out.elapsed_s < 3600  # killed at the limit, not waited for


def test_stopping_kills_the_running_worker_and_cancels_the_cell(fake_worker):
    fake_worker("hanging")
    calls = []
    out = run_child({"kind": "cell"}, timeout_s=3600, should_stop=lambda: calls.append(1) or len(calls) > 3)
    assert out.status == "cancelled" and len(calls) == 4 and out.elapsed_s < 3600  # stopped, not waited for


def test_each_worker_is_a_fresh_process_with_its_own_threads_from_a_server_that_runs_none(fake_worker):
    """Forked from the preloaded server (chattts_lab.sweep.launcher), a worker still starts clean: its own pid, its
    task on stdin, the thread count it was given, and nothing running in the server that a fork could copy."""
    fake_worker("threads_and_parent")
    one = run_child({"kind": "cell", "n": 1}, timeout_s=120, threads=1)
    two = run_child({"kind": "cell", "n": 2}, timeout_s=120, threads=2)
    assert (one.status, two.status) == ("ok", "ok"), (one.reason, two.reason)
    assert one.payload["pid"] != two.payload["pid"] and two.payload["task"] == {"kind": "cell", "n": 2}
    assert (one.payload["omp"], two.payload["omp"]) == ("1", "2")
    assert one.payload["server_threads"] == 1 and two.payload["server_threads"] == 1



def test_run_sweep_events_and_stop_keep_finished_rows(tmp_path):
    """The app's path: iterate events, press Stop while a cell runs; finished rows stay, the sweep is resumable."""
    from chattts_lab.history.store import Store
    from chattts_lab.sweep.runner import CellFinished, CellStarted, SweepFinished, SweepStarted, resumable_sweep, run_sweep

    db = tmp_path / "lab.sqlite"
    spec = SweepSpec(model="synthetic-tiny", precisions=("int4", "fp32"), tokens=(8,), fidelity=False)
    stop = []
    events = []
    for event in run_sweep(spec, db, should_stop=lambda: bool(stop)):
        events.append(event)
        if isinstance(event, CellStarted) and event.config.precision == "fp32":
            stop.append(True)  # Stop pressed while the real cell's worker is starting
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SweepStarted", "CellStarted", "CellFinished", "CellStarted", "CellFinished", "SweepFinished"]
    assert isinstance(events[0], SweepStarted) and events[0].total == 2 and events[0].environment["cpu"]
    assert isinstance(events[2], CellFinished) and events[2].result.status == "unsupported"
    assert events[4].result.status == "cancelled"
    final = events[-1]
    assert isinstance(final, SweepFinished) and final.status == "cancelled"
    assert [r.status for r in final.results] == ["unsupported", "cancelled"]
    with Store(db) as store:
        assert store.sweep(final.sweep_id)["status"] == "cancelled"
    assert resumable_sweep(db) == final.sweep_id


def test_a_worker_does_not_run_the_main_script_again(tmp_path):
    """Started from a script (app.py is one), a worker must not re-import it: multiprocessing would, by default."""
    script = tmp_path / "script.py"
    script.write_text("print('script ran')\n"
                      "from chattts_lab.sweep import supervisor\n"
                      "supervisor.WORKER_ENTRY = 'tests.support.fake_workers:threads_and_parent'\n"
                      "print(supervisor.run_child({'kind': 'cell'}, timeout_s=120).status)\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.stdout.split() == ["script", "ran", "ok"], done.stderr[-2000:]
