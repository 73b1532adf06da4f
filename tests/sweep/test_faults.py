"""Sweeps under faults, with real worker processes and a real database file: nothing measured is lost.

- a worker killed from outside (SIGKILL) becomes a `crashed` row and the sweep goes on;
- a worker that hangs (SIGSTOP) is killed at the per-cell time limit and kept as a `timeout` row;
- a per-cell memory budget (`--memory-budget-mb`, RLIMIT_AS in the worker) exhausted is an `oom` row;
- writers in several processes share one database; an older schema file is upgraded in place.

Real workers pay torch's and ChatTTS's import (tens of seconds on two busy cores), so each test
starts as few of them as it can.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.fake_workers import running_workers
from chattts_lab.history.schema import SCHEMA_VERSION
from chattts_lab.history.store import Store
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.sweep.runner import CellFinished, SweepFinished, resumable_sweep, run_cell, run_sweep

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data"
TINY = dict(model="synthetic-tiny", tokens=(8,), threads=(1,), repeats=1, min_time_s=0.0, warmup=0, fidelity=False)


def wait_for_worker(timeout_s: float = 300) -> psutil.Process:
    """This test process's sweep worker (forked by its forkserver), as soon as it exists."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = running_workers()
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no worker process started")


def run_in_thread(fn, *args, **kwargs):
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def test_a_worker_killed_from_outside_is_a_crashed_row_and_the_sweep_goes_on(tmp_path):
    db = tmp_path / "lab.sqlite"
    spec = SweepSpec(**TINY, precisions=("fp32", "bf16"))
    thread, box = run_in_thread(lambda: list(run_sweep(spec, db)))  # the app runs sweeps in a thread like this
    victim = wait_for_worker()
    os.kill(victim.pid, signal.SIGKILL)  # an outside kill (or the kernel's OOM killer) mid-cell
    thread.join(600)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    events = box["value"]
    finished = [e.result for e in events if isinstance(e, CellFinished)]
    assert [(r.config.precision, r.status) for r in finished] == [("fp32", "crashed"), ("bf16", "ok")], finished
    assert "SIGKILL" in finished[0].reason
    assert isinstance(events[-1], SweepFinished) and events[-1].status == "finished"
    with Store(db) as store:  # both rows were committed, the killed one included
        (sweep,) = store.sweeps_list()
        assert [r.status for r in store.results(sweep["id"])] == ["crashed", "ok"]
        assert sweep["status"] == "finished"
    assert not psutil.pid_exists(victim.pid) or victim.status() == psutil.STATUS_ZOMBIE


def test_a_hung_worker_is_killed_at_the_time_limit_and_kept_as_a_timeout_row(tmp_path):
    cfg = RunConfig("synthetic-tiny", "cpu", "fp32", 1, 1, 8, repeats=1, min_time_s=0, warmup=0, timeout_s=6)
    thread, box = run_in_thread(run_cell, cfg)
    worker = wait_for_worker()
    worker.suspend()  # SIGSTOP: a real hang, not a slow cell
    thread.join(120)
    assert not thread.is_alive() and "error" not in box, box.get("error")
    result = box["value"]
    assert result.status == "timeout" and "6 s" in result.reason
    assert result.elapsed_s >= 6  # not before the limit (a stopped worker never ends by itself: the join proves the kill)
    assert not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE  # killed, not left behind


def test_an_exhausted_memory_budget_is_an_oom_row_from_the_command_line(tmp_path):
    db = tmp_path / "lab.sqlite"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--model", "synthetic-tiny", "--tokens", "8", "--threads", "1", "--repeats", "1",
         "--min-time", "0", "--warmup", "0", "--fidelity", "off", "--memory-budget-mb", "20", "--db", str(db),
         "--format", "json", "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]  # the sweep itself finished: the oom cell is a result
    said = run.stdout + run.stderr
    assert "oom: out of memory" in said and "memory budget 20 MB" in said
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        (cell,) = store.results(sweep["id"])
        assert sweep["status"] == "finished" and cell.status == "oom"
        assert cell.extra["memory_limit_mb"] > 20  # the runtime's own address space plus the budget
        # the allocator's failure became the one typed error at the library's boundary, and was classified by type
        assert "chattts_lab.limits.OutOfMemory: out of memory on cpu" in cell.traceback
    row = sqlite3.connect(db).execute("SELECT status, memory_budget_mb FROM cells").fetchone()
    assert row == ("oom", 20.0)


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chattts_lab.history.store import Store
    from chattts_lab.sweep.results import CellResult, RunConfig
    from chattts_lab.sweep.spec import SweepSpec
    db, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.01)
    with Store(db) as store:
        sid = store.create_sweep(SweepSpec(model=name).to_dict(), {"hostname": name})
        for i in range(n):
            store.add_cell(sid, i, CellResult(RunConfig(name, "cpu", "fp32", 1, 1, 2 + i), "ok", reason=name))
        store.set_status(sid, "finished")
    print("WROTE", sid)
""")


def test_concurrent_writers_in_separate_processes_lose_nothing(tmp_path):
    """Two processes (say the app's sweep and a `bench` run) commit cells to one file at once."""
    db, go, n = tmp_path / "lab.sqlite", tmp_path / "go", 60
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), name, str(n), str(go)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("app", "bench")]
    go.touch()
    reads = 0
    while any(p.poll() is None for p in procs):  # a third party reads throughout
        if db.exists():
            try:
                with Store(db) as store:
                    reads += sum(store.count_cells(s["id"]) >= 0 for s in store.sweeps_list())
            except Exception as exc:  # noqa: BLE001 - any error here is the failure being tested
                pytest.fail(f"reader failed while two writers ran: {exc!r}")
        time.sleep(0.05)
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "WROTE" in out, err[-2000:]
    with Store(db) as store:
        sweeps = store.sweeps_list()
        assert sorted(s["spec"]["model"] for s in sweeps) == ["app", "bench"]
        for s in sweeps:
            assert s["status"] == "finished" and store.count_cells(s["id"]) == n
            assert {r.reason for r in store.results(s["id"])} == {s["spec"]["model"]}  # no cell crossed over
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_an_older_schema_is_upgraded_in_place_keeping_every_row(tmp_path):
    """tests/data/lab-schema-v1.sql is a database written by the first release (schema 1)."""
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript((DATA / "lab-schema-v1.sql").read_text())
    before = sqlite3.connect(db).execute("SELECT cell_key, status, latency_p50_s, result_json FROM cells").fetchall()
    barrier = threading.Barrier(4)
    errors = []

    def open_at_once():  # four openers race to upgrade the same old file
        try:
            barrier.wait()
            Store(db).close()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_at_once) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    conn = sqlite3.connect(db)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION) and meta["upgraded_from"] == "1"
    assert conn.execute("SELECT cell_key, status, latency_p50_s, result_json FROM cells").fetchall() == before
    assert "memory_budget_mb" in {r[1] for r in conn.execute("PRAGMA table_info(cells)")}
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        (old,) = store.results(sweep["id"])
        assert old.status == "ok" and old.latency.count == 3 and old.config.memory_budget_mb is None
        cfg = RunConfig("synthetic-tiny", "cpu", "bf16", 1, 1, 16, memory_budget_mb=512)
        store.add_cell(sweep["id"], 1, CellResult(cfg, "oom", "over budget"))
        assert [r.status for r in store.results(sweep["id"])] == ["ok", "oom"]
    assert resumable_sweep(db) == sweep["id"]  # the old interrupted sweep can still be resumed


@pytest.mark.slow
def test_two_real_sweeps_write_one_database_at_once(tmp_path):
    """The full version of the concurrent-writers test: two `bench` processes, real workers, one file."""
    db = tmp_path / "lab.sqlite"
    args = ["--model", "synthetic-tiny", "--tokens", "8", "--threads", "1", "--repeats", "2", "--min-time", "0",
            "--warmup", "0", "--db", str(db), "--format", "json"]
    procs = [subprocess.Popen([sys.executable, "-m", "bench", *args, "--precision", p, "--out", str(tmp_path / p)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in ("fp32", "bf16")]
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
    with Store(db) as store:
        sweeps = store.sweeps_list()
        assert len(sweeps) == 2 and {s["status"] for s in sweeps} == {"finished"}
        for s in sweeps:
            (cell,) = store.results(s["id"])
            assert cell.status == "ok" and cell.latency.count == 2
