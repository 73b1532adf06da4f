"""Shared fixtures: the real ChatTTS code on tiny synthetic weights, the real app in a subprocess, Debian chromium."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.ui import open_app

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the network
# Two test processes, each with its app, bench and worker subprocesses, share two cores: OpenMP threads that spin
# while they wait for work take the core another process needs (two tiny sweeps side by side, once, on a busy
# machine: 84 s spinning, 72 s passive). Tests time nothing they assert on, so their processes wait passively; a
# user's runs keep the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TINY = "synthetic-tiny"
ROOT = Path(__file__).resolve().parents[1]
# Browser tests still take their screenshots (taking one can fail), into a temporary folder: the README's come
# from scripts/make_screenshots.py on full-size weights, which is what a user sees.
SCREENSHOTS = Path(tempfile.gettempdir()) / "chattts_lab_screenshots"
CHROMIUM = "/usr/bin/chromium"
# Debian chromium under Playwright (never `playwright install`: it downloads a browser).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
START_TIMEOUT_S = 180  # two other engineers share these two cores: be patient

# What each engine runs on CPU, written down rather than asked of the code under test: the GPT's dtype
# when it runs, or "unsupported:" and the reason's words when it must refuse. This is the x86-64 torch
# wheel of requirements.txt (fbgemm int8, oneDNN fp16/bf16, the CPU int4 kernel all present).
CPU_PRECISION_TABLE = {
    "stock": {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "qint8",
              "int4": "unsupported:int4 runs on the lab and onnx engines only"},
    "lab": {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8", "int4": "int4"},
    "onnx": {"fp32": "float32", "fp16": "float16", "bf16": "unsupported:no bf16 graph",
             "int8": "int8", "int4": "int4"},
}
x86_64_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                 reason="CPU_PRECISION_TABLE is written for x86-64 torch builds")


# Parallel runs (pytest-xdist, `-n 3` in pytest.ini). Most of a test's time is one Python process importing torch
# and ChatTTS, which uses one core, so two test processes use a 2-core machine twice as well; a third fills the time
# the others spend waiting on a server, a browser or Ray (on one AVX2 machine: 158 % CPU and 12.4-12.8 min, against
# 150 % and 16.8 min with two; docs/measurements/2026-12-02-test-run.md; a fourth gained nothing, 13.5 min at 155 %:
# 2026-12-03-test-run.md). Each file runs whole in
# one test process (its module fixtures start once); the Ray files share one, and one Ray cluster (`ray_cluster`),
# stopped once the last of them ends. The longest files start first, so no long one is left to run alone at the end.
RAY_FILES = ("tests/sweep/test_fleet.py", "tests/serve/test_ray_serve.py")
# Test-seconds per file in one full run (2026-12-04, quiet start: docs/measurements/2026-12-04-test-run.md), longest
# first; the Ray files run as one scope (about 190-360 s together). test_lab.py's figure is its steady one: a change to
# the kernels' sources adds about 400 s there, once, building the three levels below this CPU's.
LONGEST_FIRST = (*RAY_FILES, "tests/serve/test_faults.py", "tests/webui/test_browser_benchmark.py",
                 "tests/webui/test_browser_flows.py", "tests/webui/test_browser_synthesis.py",
                 "tests/webui/test_browser_i18n.py", "tests/engines/test_lab.py", "tests/bench/test_serving.py",
                 "tests/app/test_served_default.py", "tests/engines/test_onnx.py", "tests/bench/test_cli.py",
                 "tests/sweep/test_faults.py", "tests/app/test_mcp.py", "tests/quality/test_sweep.py",
                 "tests/sweep/test_passes_interleaved.py", "tests/serve/test_continuous.py",
                 "tests/serve/test_zerogpu.py", "tests/webui/test_browser_capacity.py", "tests/bench/test_capacity.py",
                 "tests/bench/test_cost.py", "tests/sweep/test_roofline.py", "tests/library/test_synthesis.py",
                 "tests/library/test_imports.py", "tests/app/test_load.py", "tests/app/test_bad_input.py")


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_test_file(item.nodeid), len(rank)))  # stable: file order kept within


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: the files' module fixtures end first
def pytest_runtest_teardown(item, nextitem):
    """After the last test of the Ray files, their cluster stops, rather than idling through the other files."""
    if _RAY and _test_file(item.nodeid) in RAY_FILES and (
            nextitem is None or _test_file(nextitem.nodeid) not in RAY_FILES):
        _stop_ray_cluster()


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    # xdist (3.8) hands out scopes by their count of tests, most first, unless told not to: that put the browser
    # walks (5 long tests a file) among the last files started, and LONGEST_FIRST went unused.
    config.option.loadscopereorder = False

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            name = _test_file(nodeid)
            return "ray" if name in RAY_FILES else name

    return FileScheduling(config, log)


def wait_http(url: str, proc: subprocess.Popen, timeout: float, ready=(200,)) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode} before serving {url}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status in ready:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in ready:
                return
            time.sleep(0.5)
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the app did not answer at {url} within {timeout:.0f} s")


def start_app(tmp: Path, *extra: str, model: str = TINY, env: dict | None = None) -> tuple[str, subprocess.Popen]:
    """`python app.py --model MODEL --port N *extra`, its outputs and history under `tmp`; `env` adds variables.
    A port taken in the seconds before the app binds it (free_port's pick is a guess) is tried again, elsewhere."""
    from bench.serving.loadtest import PortTaken  # the library's; imported here, like the fixtures' own imports

    for attempt in range(3):
        try:
            return _start_app_once(tmp, extra, model, env)
        except PortTaken:
            if attempt == 2:
                raise


def _start_app_once(tmp: Path, extra, model: str, env: dict | None) -> tuple[str, subprocess.Popen]:
    from bench.serving.loadtest import PortTaken, free_port
    from chattts_lab.serve.listen import PORT_TAKEN

    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1",
               CHATTTS_LAB_OUTPUTS=str(tmp / "outputs"), CHATTTS_LAB_HISTORY=str(tmp / "history.sqlite"), **(env or {}))
    log_path = tmp / f"app-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--model", model, "--port", str(port), *extra],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url, proc, START_TIMEOUT_S)
        # the /v1 routes join the server a moment after Gradio's page (app.py installs them after launch)
        wait_http(url + "v1/audio/voices", proc, START_TIMEOUT_S, ready=(200, 401))
    except Exception as exc:
        proc.kill()
        if PORT_TAKEN in log_path.read_text(errors="replace"):
            raise PortTaken(f"port {port} was taken before the app bound it") from exc
        raise
    return url, proc


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("app")


@pytest.fixture(scope="session")
def app_url(app_dir):
    """The real app (`python app.py --model synthetic-tiny --port N`), shared by the whole session."""
    url, proc = start_app(app_dir)
    yield url
    stop_app(proc)


@pytest.fixture(scope="session")
def playwright_session():
    """One Playwright (sync API) per test process: a second one started while the first lives refuses to run."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium fonts-noto-cjk)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser_context(tmp_path_factory, playwright_session):
    ctx = playwright_session.chromium.launch_persistent_context(
        str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
        args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000}, accept_downloads=True,
    )
    ctx.set_default_timeout(60_000)
    yield ctx
    ctx.close()


@pytest.fixture
def page(browser_context, app_url):
    page = open_app(browser_context, app_url)
    yield page
    page.close()


@pytest.fixture
def tiny_model():
    """ChatTTS loaded in this process on tiny random weights (fp32, stock engine, 1 thread).

    Asked of `load_model` for every test, not kept for the session: its cache keeps one model, so a test
    that loads another configuration unloads this one. A cache hit costs nothing; after an eviction the
    tiny model reloads in about a second, whatever order the tests run in."""
    from chattts_lab import LoadConfig, load_model

    return load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1))


_RAY: dict = {}  # while `ray_cluster` runs: the cluster, and this process's environment before it


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray cluster started as the README starts one (tests/support/ray_cli.py): a head labelled node_a and a second node
    labelled node_b, one CPU each, token authentication on; this process finds the token as a client on the head's
    machine does (RAY_AUTH_MODE unset, the token in its file). Stopped after the last test of RAY_FILES."""
    pytest.importorskip("ray")
    from tests.support.ray_cli import CliCluster

    cluster = CliCluster()
    _RAY.update(cluster=cluster, env={name: os.environ.get(name) for name in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")})
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(cluster.token_file)
    os.environ.pop("RAY_AUTH_MODE", None)  # chattts_lab.ray_connect.connect sets it in this process: undone at the stop
    try:
        cluster.start("node_a")
        cluster.add_node("node_b")
        yield cluster
    finally:
        _stop_ray_cluster()


def _stop_ray_cluster() -> None:
    if not _RAY:
        return
    import ray

    ray.shutdown()  # the tests' own connection first: its driver would otherwise wait on a dead cluster
    _RAY.pop("cluster").stop()
    for name, value in _RAY.pop("env").items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_sessionstart(session):
    """Build the lab's kernels for this CPU once, before any test process starts (about 20 s on a fresh venv; a
    no-op when cached): otherwise the first apps started by browser tests wait on the build's lock while the other
    test processes load the machine, and an estimate or a page times out."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller built them already
        return
    from chattts_lab.engines.lab import kernels

    kernels.load()
