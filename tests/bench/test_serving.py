"""The serving benchmark (`python -m bench serve`) end to end: it starts the real app once per batch limit,
drives it over HTTP, and keeps the run in the SQLite history, where bundles carry it to another machine.

No clocks: each app waits for company as long as it takes (a long max wait), so with as many users as the
batch limit every level's batches are full and their sizes are certain.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import json
import shlex
import socket
import subprocess
import sys

import pytest

from bench.serving.loadtest import ServeSpec, free_port, run_to_end
from bench.serving.summaries import batching_gain, serving_frame
from chattts_lab.sweep.spec import SpecError
from chattts_lab.history.bundle import BundleError, export_bundle, import_bundle, read_bundle
from chattts_lab.history.frames import sweeps_frame
from chattts_lab.history.store import Store
from chattts_lab.metrics import SAMPLE_RATE, samples_for_tokens
from tests.conftest import ROOT, TINY


def first_pick(port: int, picked: list[int]):
    """A free_port whose first pick is `port`, then free_port's own; each pick is appended to `picked`."""
    picks = iter([port])

    def pick() -> int:
        picked.append(next(picks, None) or free_port())
        return picked[-1]
    return pick


@pytest.fixture(scope="module")
def serving_run(tmp_path_factory):
    """`python -m bench serve` (as `bench.cli.main`, in this process: the apps it starts are its own processes) over
    two batch limits. free_port's first pick is a port something else already listens on, as when a port is taken
    in the seconds between the pick and the app's bind: the run must start that app elsewhere. (db, what it printed,
    the ports it picked, the taken one)."""
    from bench.cli import main
    from bench.serving import loadtest

    db = tmp_path_factory.mktemp("serve") / "history.sqlite"
    argv = ["serve", "--model", TINY, "--users", "2", "--max-batch", "2,1", "--requests", "2", "--tokens", "8",
            "--max-wait-ms", "600000", "--batching", "request", "--db", str(db)]
    picked: list[int] = []
    with socket.socket() as taken, pytest.MonkeyPatch.context() as patch:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        patch.setattr(loadtest, "free_port", first_pick(taken_port, picked))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    assert code == 0, err.getvalue()[-3000:]
    return db, out.getvalue(), picked, taken_port


def test_every_request_is_served_and_batches_are_as_large_as_the_limit(serving_run):
    db, printed, *_ = serving_run
    levels = serving_frame(db)
    assert list(levels["max_batch"]) == [2, 1] and list(levels["users"]) == [2, 2]
    assert list(levels["ok"]) == [4, 4] and list(levels["errors"]) == [0, 0] and list(levels["lost"]) == [0, 0]
    assert list(levels["batch_sizes"]) == [{"2": 4}, {"1": 4}]  # requests per batch size (JSON keys are text)
    assert levels["audio_s_per_s"].gt(0).all() and levels["ttfa_p90_s"].gt(0).all()
    assert levels["config"].str.contains("lab, int8, cpu").all()  # the app's default with no sweep: lab int8
    assert "2 users at once, batches of up to 2 against one at a time" in printed


def test_a_serving_run_is_history_and_travels_in_a_bundle(serving_run, tmp_path):
    db, *_ = serving_run
    runs = sweeps_frame(db)
    assert list(runs["kind"]) == ["serve"] and list(runs["status"]) == ["finished"]
    with Store(db) as store:
        requests = store.notes(int(runs["id"][0]))["serving"]["requests"]
    assert len(requests) == 8 and all(r["queue_s"] is not None and r["ttfb_s"] is not None for r in requests)
    # every request as long as --tokens asked (until 2026-12-04 a run that is not --mixed asked for half)
    asked_s = samples_for_tokens(8) / SAMPLE_RATE
    assert {r["tokens"] for r in requests} == {8} and all(abs(r["audio_s"] - asked_s) < 0.5 / SAMPLE_RATE for r in requests)
    # every streamed request as a listener heard it (no assertion on speed: a loaded machine may stall)
    assert all(r["stall_worst_s"] >= 0 and r["stall_total_s"] >= r["stall_worst_s"] and isinstance(r["continuous"], bool)
               for r in requests)
    levels = serving_frame(db)
    assert levels["continuity_pct"].between(0, 100).all() and levels["stall_worst_p99_s"].ge(0).all()
    bundle = export_bundle(db, tmp_path / "bundle.json")
    other = tmp_path / "other.sqlite"
    import_bundle(other, bundle)
    theirs = serving_frame(other)
    assert list(theirs["latency_p90_s"]) == list(serving_frame(db)["latency_p90_s"])


def test_a_bundle_with_a_malformed_serving_note_is_refused(serving_run, tmp_path):
    db, *_ = serving_run
    data = json.loads(export_bundle(db, tmp_path / "b.json").read_text())
    data["sweeps"][0]["notes"]["serving"]["levels"][0]["latency_p90_s"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match="serving level is malformed"):
        read_bundle(tmp_path / "bad.json")


@pytest.mark.parametrize("changes, message", [
    (dict(users=(0,)), "users must be in 1..256"),
    (dict(users=(), rates=()), "at least one load level"),
    (dict(max_batches=(99,)), "max batch must be in 0..64"),
    (dict(tokens=0), "tokens must be"),
    (dict(url="http://box:7860/", max_batches=(8, 1)), "the running app's own batching"),
])
def test_impossible_serving_runs_are_refused_with_the_reason(changes, message):
    with pytest.raises(SpecError, match=message):
        ServeSpec(**changes).validate()


def test_the_command_line_refuses_a_bad_level_before_starting_anything(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench", "serve", "--users", "0", "--db", str(tmp_path / "h.sqlite")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "users must be in 1..256" in done.stderr
    assert not (tmp_path / "h.sqlite").exists()


def test_the_ui_builds_the_same_spec_as_the_command_line():
    from bench.cli import build_parser
    from bench.serving.cli import spec_from_args
    from chattts_lab.serve.context import AppContext
    from chattts_lab.serve.policy import ServingPolicy
    from webui.benchmark.serving_tab import cli_command, serving_spec

    cli = spec_from_args(build_parser().parse_args(["serve", "--model", TINY, "--users", "1-4*2", "--max-batch",
                                                    "8,1", "--requests", "3", "--tokens", "32", "--engine", "lab"]))
    ctx = AppContext(ServingPolicy(model=TINY))
    ui = serving_spec(ctx, "1-4*2", "8,1", 3, 32, True, "lab", "the app's default")
    assert ui == cli
    shown = shlex.split(cli_command(ctx, ui))  # the command line the panel shows runs the same spec
    assert shown[:4] == ["python", "-m", "bench", "serve"]
    assert spec_from_args(build_parser().parse_args(shown[3:])) == ui


def test_an_untouched_command_line_and_panel_run_the_specs_own_defaults():
    from bench.cli import build_parser
    from bench.serving.cli import spec_from_args

    assert spec_from_args(build_parser().parse_args(["serve"])) == ServeSpec()
    assert spec_from_args(build_parser().parse_args(["serve", "--rate", "0.5"])).users == ()  # only open loop
    assert spec_from_args(build_parser().parse_args(["serve", "--url", "http://box:7860/"])).max_batches == (0,)


def test_the_gain_sentence_compares_batched_with_one_at_a_time_at_the_same_load():
    level = dict(users=8, ok=8, ttfa_p90_s=0.5, ttfa_p99_s=0.6)
    sentence = batching_gain([{**level, "max_batch": 8, "audio_s_per_s": 3.0, "latency_p90_s": 4.0},
                              {**level, "max_batch": 1, "audio_s_per_s": 1.0, "latency_p90_s": 10.0}], 8)
    assert "3.00x the audio per second" in sentence and "p90 latency 0.40x" in sentence
    assert batching_gain([{**level, "max_batch": 8, "audio_s_per_s": 3.0, "latency_p90_s": 4.0}], 8) is None


def test_an_apps_port_is_picked_below_the_ephemeral_range_where_no_outgoing_connection_takes_it():
    """On 2026-12-04 an outgoing connection took the session app's port in the seconds before it bound it, and 47
    tests that share that app failed. Linux's ephemeral range is read from /proc where it can be."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except OSError:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range here")
    for _ in range(20):
        port = free_port()
        assert 20_000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free, as it said


def test_bench_serve_starts_its_app_elsewhere_when_the_picked_port_is_taken_before_the_bind(serving_run):
    """free_port's pick is a guess: something may bind the port in the seconds before the app does (the tests' own
    apps once lost theirs that way). The app exits at once saying the port is taken (chattts_lab.serve.listen); bench serve tries another.
    The serving run's first app was given a taken port; every request of its levels was still served."""
    db, _, picked, taken = serving_run
    assert picked[0] == taken and taken not in picked[1:]
    assert len(picked) == 3  # the first level's app once more, elsewhere, then the second level's
    assert list(serving_frame(db)["ok"]) == [4, 4]


def test_a_serving_run_s_requests_run_from_a_thread_that_already_runs_an_event_loop():
    """`python -m bench serve` called where an event loop runs (a notebook, a test process that drove a browser):
    asyncio.run alone refuses there."""
    async def answer():
        return 42

    async def caller():  # a running loop, calling the benchmark's synchronous code
        return run_to_end(answer())

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a fresh thread: whatever this process's main one runs
        assert pool.submit(run_to_end, answer()).result() == 42
        assert pool.submit(asyncio.run, caller()).result() == 42

