"""Sweeps run from the real app: users wait behind a running sweep (its timings stay clean), bad or
huge grids are refused before anything starts, and an app killed mid-sweep loses no finished cell."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from chattts_lab.history.store import Store
from chattts_lab.sweep.runner import resumable_sweep
from tests.conftest import start_app, stop_app
from tests.support.fake_workers import running_workers

SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=8, split=False)
# /run_sweep inputs in the README's order: devices, precisions, batches, threads, tokens, repeats, stream
TINY_SWEEP = ("cpu", "fp32", "1", "1", "8", 1, False)
HANG_GUARD_S = 600  # only ends a test that would hang; no speed is asserted


def wait_until(condition, what: str):
    """Poll `condition` until it gives something truthy, and return that."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what}")


def statuses(table: dict) -> list[str]:
    """The status column of a `/run_sweep` table ({"headers": [...], "data": [[...], ...]})."""
    column = table["headers"].index("status")
    return [row[column] for row in table["data"]]


def _sweep_statuses(db) -> dict[int, str]:
    if not db.exists():
        return {}
    with Store(db) as store:
        return {s["id"]: s["status"] for s in store.sweeps_list()}


def _cells_stored(db) -> int:
    if not db.exists():
        return 0
    with Store(db) as store:
        sweeps = store.sweeps_list()
        return store.count_cells(sweeps[0]["id"]) if sweeps else 0


def _app_workers(app: subprocess.Popen) -> list[psutil.Process]:
    return running_workers(app.pid)


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


@pytest.mark.parametrize("inputs, message", [
    (("cpu", "fp32", "0", "1", "8", 1, False), "batch size must be in 1..64, got 0"),
    (("cpu", "fp32", "-1", "1", "8", 1, False), "batch size must be in 1..64, got -1"),
    (("cpu", "fp32", "one", "1", "8", 1, False), "'one' is not a whole number"),
    (("cpu", "fp32", "1", "1", "100000", 1, False), "tokens must be in 2..2048"),
    (("cpu", "fp32", "1", "1", "8", 0, False), "repeats must be in 1..10000"),
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


def test_a_user_who_arrives_during_a_sweep_is_served_only_after_it(app_url, client, app_dir):
    """A sweep holds the model: a synthesis request that arrives meanwhile waits (in the app's batcher) and is made
    only once the sweep has ended, so it cannot disturb the sweep's timings. A sweep is marked ended in the store
    before it lets go of the model, so the store must say `finished` by the time the request is answered."""
    from gradio_client import Client

    db = app_dir / "history.sqlite"
    user = Client(app_url, verbose=False)
    user.predict("Warm.", "Aria", *SYNTH.values(), api_name="/synthesize")
    before = set(_sweep_statuses(db))
    sweep = client.submit(*TINY_SWEEP, api_name="/run_sweep")
    sweep_id = wait_until(lambda: next((i for i, s in _sweep_statuses(db).items() if i not in before and s == "running"),
                                       None), "the sweep to start")
    job = user.submit("I arrive while a sweep runs.", "Aria", *SYNTH.values(), api_name="/synthesize")
    path, m = job.result(timeout=HANG_GUARD_S)
    assert _sweep_statuses(db)[sweep_id] == "finished", "the request was served while the sweep still ran"
    assert m["tokens"][0] > 0
    assert statuses(sweep.result(timeout=HANG_GUARD_S)) == ["ok"]  # the sweep's cell was measured


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: a killed sweep resumes: test_bench_cli
def test_the_app_killed_mid_sweep_keeps_finished_cells_and_leaves_the_sweep_resumable(tmp_path):
    from gradio_client import Client

    url, proc = start_app(tmp_path)
    db = tmp_path / "history.sqlite"
    try:
        Client(url, verbose=False).submit("cpu", "fp32,bf16", "1", "1", "8", 1, False, api_name="/run_sweep")
        # Kill the app once the first cell is stored and the second one's worker is seen running.
        orphans = wait_until(lambda: _cells_stored(db) >= 1 and _app_workers(proc), "the second cell's worker")
        proc.kill()  # SIGKILL: no clean-up at all
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
    # `bench --resume` picks it up; resuming itself is tested on the command line (tests/bench/test_cli.py), and
    # the app stores the spec the command line builds (tests/sweep/test_spec_parity.py).
    assert resumable_sweep(db) == sweep["id"]
