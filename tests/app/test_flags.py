"""Bad flags of `python app.py` fail fast: one line, no server started (the model folder included)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_model_folder_that_does_not_exist_stops_the_app_at_once_with_one_line(tmp_path):
    missing = tmp_path / "nonexistent-folder"
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--model", str(missing), "--port", "1"],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)  # a server would never end
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"--model {missing}: model folder {missing} does not exist (use auto, hf, synthetic, synthetic-tiny or a "
        "model folder)"]
    assert "Running on" not in proc.stdout  # no server was started


def test_a_folder_without_the_released_layout_is_refused_before_the_server_starts(tmp_path):
    import app

    (tmp_path / "weights").mkdir()
    with pytest.raises(SystemExit, match=r"lacks the released asset/ layout"):
        app.main(["--model", str(tmp_path / "weights")])


def test_a_port_another_server_holds_stops_the_app_at_once_with_one_line(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--model", "synthetic-tiny", "--port", str(port)],
                              capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"port {port} is taken by another server: stop that server or choose another port with --port"]
    assert "Running on" not in proc.stdout
