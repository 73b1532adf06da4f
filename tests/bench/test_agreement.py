"""The issue's acceptance check (slow: full-size weights, minutes on 2 cores; run with -m slow on a quiet
machine): a sweep cell agrees with an independent in-process measurement of the same configuration."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sweep_cell_agrees_with_an_independent_measurement(tmp_path):
    db, out = tmp_path / "lab.sqlite", tmp_path / "out"
    common = ["--model", "synthetic", "--threads", "2", "--tokens", "128", "--repeats", "3"]
    run = subprocess.run([sys.executable, "-m", "bench", *common, "--precision", "fp32", "--batch", "1",
                          "--fidelity", "off", "--db", str(db), "--out", str(out), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-2000:]
    (cell,) = json.loads((out / "results.json").read_text())["cells"]
    ind = subprocess.run([sys.executable, "-m", "bench.independent", *common], cwd=ROOT, capture_output=True,
                         text=True, timeout=1800)
    assert ind.returncode == 0, ind.stderr[-2000:]
    ref = json.loads(ind.stdout.strip().splitlines()[-1])
    assert cell["step_ms"] == pytest.approx(ref["step_ms"], rel=0.15)
    assert cell["rtf"] == pytest.approx(ref["rtf"], rel=0.15)
