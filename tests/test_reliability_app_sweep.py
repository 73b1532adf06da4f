"""Sweeps run from the real app: users wait behind a running sweep (its timings stay clean), bad or
huge grids are refused before anything starts, and an app killed mid-sweep loses no finished cell."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest

from chattts_lab.store import Store
from chattts_lab.sweep import resumable_sweep
from tests.conftest import ROOT, start_app, stop_app

SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=8, split=False)
# /run_sweep inputs: devices, precisions, batches, threads, tokens, repeats, stream
TINY_SWEEP = ("cpu", "fp32", "1", "1", "8", 1, False)


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


@pytest.mark.parametrize("inputs, message", [
    (("cpu", "fp32", "0", "1", "8", 1, False), "batch size must be in 1..64, got 0"),
    (("cpu", "fp32", "-1", "1", "8", 1, False), "batch size must be in 1..64, got -1"),
    (("cpu", "fp32", "one", "1", "8", 1, False), "'one' is not a whole number"),
    (("cpu", "fp32", "1", "1", "100000", 1, False), "tokens must be in 2..2048"),
    (("cpu", "fp32", "1", "1", "8", 0, False), "repeats must be at least 1"),
    (("cpu", "fp64", "1", "1", "8", 1, False), "unknown precision 'fp64'"),
    (("tpu", "fp32", "1", "1", "8", 1, False), "unknown device 'tpu'"),
    (("cpu", "fp32", "1-64", "1", "2048", 50, False), "would take about"),
])
def test_bad_or_huge_sweeps_are_refused_before_starting(client, app_dir, inputs, message):
    from gradio_client.exceptions import AppError

    def sweeps() -> int:
        db = app_dir / "history.sqlite"
        if not db.exists():
            return 0
        with Store(db) as store:
            return len(store.sweeps_list())

    before = sweeps()
    with pytest.raises(AppError, match=message):
        client.predict(*inputs, api_name="/run_sweep")
    assert sweeps() == before  # refused before anything started


def test_a_user_waits_behind_a_running_sweep_and_is_shown_a_queue_position(app_url, client):
    from gradio_client import Client
    from gradio_client.utils import Status

    user = Client(app_url, verbose=False)
    user.predict("Warm.", "Aria", *SYNTH.values(), api_name="/synthesize")
    sweep = client.submit(*TINY_SWEEP, api_name="/run_sweep")
    deadline = time.monotonic() + 120
    while sweep.status().code != Status.PROCESSING and time.monotonic() < deadline:
        time.sleep(0.02)
    job = user.submit("I arrive while a sweep runs.", "Aria", *SYNTH.values(), api_name="/synthesize")
    ranks, started = [], {}

    def watch():
        while not job.done():
            st = job.status()
            if st.code == Status.IN_QUEUE and st.rank is not None:
                ranks.append(st.rank)
            if st.code == Status.PROCESSING and "user" not in started:
                started["user"] = time.monotonic()
            if sweep.done() and "sweep_done" not in started:
                started["sweep_done"] = time.monotonic()
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    table = sweep.result(timeout=600)
    sweep_done = time.monotonic()
    path, m = job.result(timeout=600)
    watcher.join(30)
    assert table["data"] and "ok" in str(table["data"][0])  # the sweep's cell was measured
    assert ranks  # the user was shown a queue position while the sweep ran
    assert started.get("user", sweep_done) >= started.get("sweep_done", sweep_done) - 0.5  # ran only after it
    assert m["tokens"][0] > 0


def _workers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if "chattts_lab.worker" in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def test_the_app_killed_mid_sweep_keeps_finished_cells_and_the_sweep_resumes(tmp_path):
    from gradio_client import Client

    url, proc = start_app(tmp_path)
    db = tmp_path / "history.sqlite"
    try:
        Client(url, verbose=False).submit("cpu", "fp32,bf16", "1", "1", "8", 1, False, api_name="/run_sweep")
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            if db.exists():
                with Store(db) as store:
                    sweeps = store.sweeps_list()
                    if sweeps and store.count_cells(sweeps[0]["id"]) >= 1:
                        break
            time.sleep(0.2)
        else:
            pytest.fail("no cell finished in time")
        orphans = [w for w in _workers() if w.ppid() == proc.pid]
        proc.kill()  # SIGKILL: no clean-up at all, mid-way through the second cell
        proc.wait(30)
    finally:
        stop_app(proc)
    gone, alive = psutil.wait_procs(orphans, timeout=30)
    assert not alive, "a worker outlived the killed app"
    with Store(db) as store:  # what the restarted app (or `bench`) sees on opening the database
        (sweep,) = store.sweeps_list()
        assert sweep["status"] == "interrupted"
        kept = store.results(sweep["id"])
        assert [(r.config.precision, r.status) for r in kept] == [("fp32", "ok")]
    assert resumable_sweep(db) == sweep["id"]
    resumed = subprocess.run([sys.executable, "-m", "bench", "--resume", "--db", str(db), "--format", "json",
                              "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        results = store.results(sweep["id"])
        assert sweep["status"] == "finished"
        assert [(r.config.precision, r.status) for r in results] == [("fp32", "ok"), ("bf16", "ok")]
        assert results[0].to_dict() == kept[0].to_dict()  # the cell measured before the kill was kept as is
