"""A fleet sweep on a Ray cluster started as the README starts one (conftest's `ray_cluster`: `ray start` in
subprocesses, a head labelled node_a and a second node labelled node_b, token authentication on).

`python -m bench --cluster ray:ADDRESS --nodes node_a,node_b` measures one cell on each node, each for at least
MIN_TIME_S of timed calls. Once node_b's cell worker runs (seen among node_b's processes), node_b is killed, every
process of its `ray start` at once, as when a machine goes away: the finished row of node_a stays, node_b's cell is
a `lost` row with its reason, and once a node_b is back `--resume` measures it. Meanwhile a client without the
token is refused with what to set. One scenario serves every test here (Ray starts slowly).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from chattts_lab import ray_connect
from chattts_lab.sweep import cluster as lab_cluster
from chattts_lab.history.report import markdown_table, results_frame
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.sweep.spec import SpecError, SweepSpec
from chattts_lab.history.frames import cells_frame, compare_frame
from chattts_lab.history.store import Store
from chattts_lab.sweep.fleet import fleet_result, measure_on_node
from chattts_lab.sweep.runner import run_sweep
from tests.conftest import ROOT, TINY
from tests.support.fake_workers import is_worker
from tests.support.ray_cli import WAIT_S, without_auth

# Timed calls of each cell last at least this long: once node_b's worker has started, its cell has at least its
# imports, its load and this much left to run, a wide margin over the test's next step (killing the node).
MIN_TIME_S = "3"


def bench(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def cell_worker_on(cluster, label: str, sweep: subprocess.Popen) -> psutil.Process:
    """The cell's worker process (forked by the Ray task's forkserver) on the node, once it exists."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for proc in cluster.processes(label):
            if is_worker(proc):  # a process that ended meanwhile is none
                return proc
        if sweep.poll() is not None:
            pytest.fail(f"the sweep ended before a cell worker ran on {label}:\n{sweep.stdout.read()}")
        assert time.monotonic() < deadline, f"no cell worker on {label} after {WAIT_S} s"
        time.sleep(0.1)  # polling the node's processes: the condition itself, however long it takes


def process_ended(proc: psutil.Process) -> bool:
    return not psutil.wait_procs([proc], timeout=WAIT_S)[1]


def rows(db: Path) -> dict:
    """node label -> the cell's row, as the history reads it."""
    return {r["node"]: r for r in cells_frame(db).to_dict("records")}


def a_cell_id(db: Path) -> int:
    return sqlite3.connect(db).execute("SELECT id FROM cells WHERE cell_key LIKE '%node=node_a'").fetchone()[0]


@pytest.fixture(scope="module")
def scenario(ray_cluster, tmp_path_factory):
    """Run the sweep, lose node_b while its cell runs, bring node_b back, resume; what each step left."""
    tmp = tmp_path_factory.mktemp("fleet")
    db, address = tmp / "lab.sqlite", f"ray:{ray_cluster.address}"
    no_token = {**without_auth(os.environ), "HOME": str(tmp)}  # nor a ~/.ray/auth_token
    started: list[subprocess.Popen] = []
    try:
        refused = bench("--model", TINY, "--cluster", address, "--tokens", "8", "--fidelity", "off", "--db",
                        str(tmp / "refused.sqlite"), env=no_token)  # Ray retries for a while: it runs meanwhile
        started.append(refused)
        sweep = bench("--model", TINY, "--cluster", address, "--nodes", "node_a,node_b", "--threads", "1",
                      "--tokens", "8", "--repeats", "1", "--min-time", MIN_TIME_S, "--warmup", "0",
                      "--fidelity", "off", "--db", str(db), "--format", "json", env=ray_cluster.client_env)
        started.append(sweep)
        worker = cell_worker_on(ray_cluster, "node_b", sweep)
        ray_cluster.kill_node("node_b")
        worker_gone = process_ended(worker)
        with ThreadPoolExecutor(1) as pool:  # the machine comes back while the sweep ends (no cell is retried)
            back = pool.submit(ray_cluster.add_node, "node_b")
            out, _ = sweep.communicate(timeout=WAIT_S)
            after_loss = {"code": sweep.returncode, "out": out, "rows": rows(db), "worker_gone": worker_gone,
                          "a_cell_id": a_cell_id(db)}
            back.result(timeout=WAIT_S)
        resume = bench("--db", str(db), "--resume", "--format", "json", env=ray_cluster.client_env)
        out, _ = resume.communicate(timeout=WAIT_S)
        resumed = {"code": resume.returncode, "out": out, "rows": rows(db), "a_cell_id": a_cell_id(db)}
        out, _ = refused.communicate(timeout=WAIT_S)
        yield after_loss, resumed, db, ray_cluster.address, {"code": refused.returncode, "out": out}
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()


def test_a_node_lost_mid_cell_leaves_the_finished_row_and_a_lost_row_with_its_reason(scenario):
    after_loss, *_ = scenario
    assert after_loss["code"] == 1, after_loss["out"]  # the sweep is not finished: it is resumable
    assert "--resume" in after_loss["out"]
    a, b = after_loss["rows"]["node_a"], after_loss["rows"]["node_b"]
    assert a["status"] == "ok" and a["latency_p50_s"] > 0
    assert b["status"] == "lost"
    assert "node 'node_b' was lost while the cell ran" in b["reason"]
    assert after_loss["worker_gone"], "the lost cell's worker process outlived its node"


def test_resume_measures_the_lost_cell_and_keeps_the_finished_one(scenario):
    after_loss, resumed, *_ = scenario
    assert resumed["code"] == 0, resumed["out"]
    assert "1 of 2 cells to measure" in resumed["out"]
    assert resumed["a_cell_id"] == after_loss["a_cell_id"]  # node_a's row was not measured again
    assert {label: r["status"] for label, r in resumed["rows"].items()} == {"node_a": "ok", "node_b": "ok"}


def test_each_row_records_its_node_and_that_nodes_environment(scenario):
    _, resumed, db, *_ = scenario
    a, b = resumed["rows"]["node_a"], resumed["rows"]["node_b"]
    assert a["node_id"] != b["node_id"] and all(len(r["node_id"]) > 16 for r in (a, b))
    for row in (a, b):
        assert len(row["node_fingerprint"]) == 12 and "GB" in row["node_machine"]
    (body,) = [json.loads(r[0]) for r in sqlite3.connect(db).execute(
        "SELECT result_json FROM cells WHERE cell_key LIKE '%node=node_b'")]
    assert body["node"]["label"] == "node_b" and body["node"]["environment"]["cpu"]["usable_cores"] >= 1


def test_a_label_no_node_carries_is_refused_before_a_sweep_exists(scenario, tmp_path):
    _, _, _, address, _ = scenario
    spec = SweepSpec(model=TINY, threads=(1,), tokens=(8,), fidelity=False, cluster=f"ray:{address}",
                     nodes=("node_a", "node_c"))
    with pytest.raises(SpecError, match="no live node of the cluster carries the label.s. node_c; the nodes carry "
                                        "node_a, node_b"):
        next(run_sweep(spec, tmp_path / "lab.sqlite"))
    with Store(tmp_path / "lab.sqlite") as store:
        assert store.sweeps_list() == []


def test_a_task_that_raises_on_its_node_is_an_error_row_with_the_nodes_traceback(scenario):
    _, _, _, address, _ = scenario
    pool = lab_cluster.TaskPool(ray_connect.connect(f"ray:{address}"))
    cfg = RunConfig(TINY, "cpu", "fp32", 1, 1, 8, node="node_a")
    pool.submit(measure_on_node, {"model": TINY}, (0, cfg), **lab_cluster.placement(cfg))  # not a whole config
    ends = []
    while len(pool):
        ends += pool.ended(timeout_s=1.0)
    (end,) = ends
    assert end.failure == "raised" and end.reason.startswith("TypeError")
    row = fleet_result(end)
    assert row.status == "error" and row.reason.startswith("the cell's Ray task raised TypeError")
    assert "measure_on_node" in row.traceback and row.node == {"label": "node_a"}


def test_a_client_without_the_token_is_refused_with_what_to_set(scenario):
    *_, refused = scenario
    assert refused["code"] == 2, refused["out"]
    (line,) = [ln for ln in refused["out"].splitlines() if "cannot connect to the Ray cluster" in ln]
    assert "this machine has no Ray token" in line
    assert "`ray get-auth-token` prints the cluster's token" in line and "RAY_AUTH_TOKEN" in line


def test_node_labels_need_a_cluster_and_a_cluster_is_ray():
    assert SweepSpec(nodes=("gpu-box",)).errors() == ["node labels need a cluster (--cluster ray[:ADDRESS])"]
    assert SweepSpec(cluster="dask:1.2.3.4").errors()[0].startswith("cluster must be ray or ray:ADDRESS")
    assert SweepSpec(cluster="ray", nodes=("a b",)).errors()[0].startswith("node label 'a b' is not")


def test_a_fleet_sweeps_rows_are_shown_and_compared_by_node(tmp_path):
    """Stored rows of two nodes (no Ray needed): the table leads with `node`, a comparison has a column per node."""
    def row(node: str, elapsed_s: float) -> CellResult:
        cfg = RunConfig(TINY, "cpu", "fp32", 1, 1, 8, node=node)
        env = {"hostname": f"host-{node}", "cpu": {"model": "Xeon", "usable_cores": 4}, "ram_gb": 16, "gpus": []}
        where = {"label": node, "node_id": f"id-{node}", "environment": env}
        return CellResult(cfg, "ok", elapsed_s=elapsed_s, node=where)

    db = tmp_path / "lab.sqlite"
    with Store(db) as store:
        sid = store.create_sweep(SweepSpec(cluster="ray", nodes=("a", "b")).to_dict(), {"hostname": "head"})
        for i, (node, elapsed_s) in enumerate((("a", 1.0), ("b", 2.0))):
            store.add_cell(sid, i, row(node, elapsed_s))
        results = store.results(sid)
    one_machine = CellResult(RunConfig(TINY, "cpu", "fp32", 1, 1, 8), "ok")
    assert markdown_table(results_frame(results)).splitlines()[0].startswith("| node | engine |")
    assert markdown_table(results_frame([one_machine])).splitlines()[0].startswith("| engine |")
    table = compare_frame(db, [sid], "elapsed_s")
    machine = "Xeon x4, 16 GB, no GPU, torch None"
    assert table[[f"{sid}: a · {machine}", f"{sid}: b · {machine}"]].values.tolist() == [[1.0, 2.0]]


def test_a_client_told_to_send_no_token_hears_which_variable_stops_it(monkeypatch):
    """No cluster needed: the refusal's advice when this machine's RAY_AUTH_MODE is not token."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    said = ray_connect.refused("10.0.0.1:6379", ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379"))
    assert said == ("cannot connect to the Ray cluster at 10.0.0.1:6379: Failed to connect to Ray cluster at "
                    "10.0.0.1:6379. Check that its head runs there (`ray start --head --port PORT`); RAY_AUTH_MODE is "
                    "'disabled' here, so no token is sent: unset it, or set it to token")
