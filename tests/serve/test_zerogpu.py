"""Hugging Face ZeroGPU (chattts_lab/serve/zerogpu.py, its sweep in webui/benchmark/sweep_run.py): the app with `spaces` absent, with it installed off ZeroGPU, and on a
ZeroGPU Space faked as far as this machine allows (no GPU here: a stand-in for ZeroGPU's device API answers its
start-up report; nothing is scheduled on a GPU)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, start_app, stop_app

pytest.importorskip("spaces")
GPU_FUNCTIONS = {"gpu_synthesize", "gpu_sweep"}  # exactly the work that touches the GPU: synthesis and GPU sweeps


def page_config(url: str) -> str:
    with urllib.request.urlopen(url + "config") as r:
        return r.read().decode()


def synthesize_error(url: str, **kw) -> str:
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as error:
        Client(url, verbose=False).predict("Hello there.", api_name="/synthesize", **kw)
    return str(error.value)


def test_without_spaces_the_app_starts_serves_and_says_it_runs_on_this_machine(tmp_path):
    shim = tmp_path / "shim" / "spaces"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('spaces hidden by the test')\n")
    url, proc = start_app(tmp_path, env={"PYTHONPATH": f"{shim.parent}{os.pathsep}{ROOT}"})
    try:
        assert "Runs on **this machine**" in page_config(url)
        from gradio_client import Client

        path, m = Client(url, verbose=False).predict("Hi", max_new_token=8, api_name="/synthesize")
        assert Path(path).stat().st_size > 0 and m["synthetic"] is True
    finally:
        stop_app(proc)


def test_with_spaces_installed_off_zerogpu_the_gpu_functions_are_left_as_they_are():
    from chattts_lab.serve import zerogpu
    from webui.benchmark import sweep_run  # noqa: F401  (decorates gpu_sweep)

    assert not zerogpu.active()
    assert set(zerogpu.DECORATED) == GPU_FUNCTIONS
    assert all(not hasattr(fn, "zerogpu") for fn in zerogpu.DECORATED.values())  # spaces.GPU is a no-op here


class _DeviceApi(http.server.BaseHTTPRequestHandler):
    """Answers ZeroGPU's start-up report, the only call a Space makes before a GPU function runs."""

    def do_POST(self):
        self.send_response(200 if self.path.endswith("/startup-report") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def fake_zerogpu(tmp_path_factory):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DeviceApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": f"http://127.0.0.1:{server.server_port}",
           "CHATTTS_LAB_ZEROGPU_MAX_S": "60"}
    yield env
    server.shutdown()


def test_on_a_fake_zerogpu_space_exactly_synthesis_and_gpu_sweeps_are_decorated(fake_zerogpu):
    listed = subprocess.run(
        [sys.executable, "-c", "import spaces, json; from chattts_lab.serve import zerogpu; import webui.benchmark.sweep_run; print(json.dumps("
                               "{n: hasattr(f, 'zerogpu') for n, f in zerogpu.DECORATED.items()}))"],
        cwd=ROOT, env=dict(os.environ, **fake_zerogpu), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert json.loads(listed.stdout.strip().splitlines()[-1]) == {name: True for name in GPU_FUNCTIONS}


def test_on_a_fake_zerogpu_space_the_page_says_so_and_a_request_over_the_limit_is_refused_clearly(
        tmp_path, fake_zerogpu):
    url, proc = start_app(tmp_path, env=fake_zerogpu)
    try:
        assert "Runs on **ZeroGPU**" in page_config(url)
        message = synthesize_error(url, max_new_token=2048)
        assert ("needs about 105 s of GPU time, over the 60 s ZeroGPU lends this Space per call: lower 'max audio "
                "tokens' to 925 or less") in message
    finally:
        stop_app(proc)


def test_the_readmes_space_steps_name_files_and_settings_that_exist():
    import re

    import gradio

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### As a Hugging Face Space", 1)[1].split("\n## ", 1)[0]
    front = dict(re.findall(r"^(\w+): (.+)$", readme.split("---")[1], re.M))
    assert (front["sdk"], front["sdk_version"], front["python_version"]) == ("gradio", gradio.__version__, '"3.11"')
    assert f"sdk gradio {gradio.__version__}" in section and f"app_file `{front['app_file']}`" in section
    files = set(re.findall(r"`([\w.-]+\.(?:md|py|txt)|LICENSE)`", section))
    assert files >= {"README.md", "app.py", "requirements.txt", "packages.txt", "LICENSE"}
    assert all((ROOT / name).is_file() for name in files), files
    assert "ffmpeg" in (ROOT / "packages.txt").read_text().split()
    code = "".join((ROOT / name).read_text() for name in ("app.py", "chattts_lab/serve/zerogpu.py",
                                                           "chattts_lab/serve/policy.py"))  # the app's settings
    for variable in re.findall(r"`(CHATTTS_LAB_\w+)`", section):
        assert variable in code, variable
    from chattts_lab.serve.zerogpu import DEFAULT_MAX_S

    assert f"default {DEFAULT_MAX_S})" in section
