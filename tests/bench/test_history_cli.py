"""README claims of `python -m bench` run for real on tiny synthetic weights: `--engine lab`, `--export`,
`--import` and `--compare`, range syntax on the command line, and a failed cell that keeps its traceback."""

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from chattts_lab.history.report import results_frame, write_reports
from chattts_lab.sweep.results import RunConfig
from chattts_lab.history.bundle import export_bundle
from chattts_lab.history.store import Store
from chattts_lab.sweep.runner import run_cell
from tests.support.cli import bench_here

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--model", "synthetic-tiny", "--tokens", "8", "--threads", "1", "--repeats", "2", "--min-time", "0",
        "--warmup", "0", "--fidelity", "off"]


def bench(*args, timeout=600):
    run = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def markdown_rows(text: str) -> list[dict]:
    """The rows of the last markdown table printed, as dicts keyed by its header."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_ranges_on_the_command_line_expand_as_the_readme_says(tmp_path, capsys):
    run = bench_here(capsys, "--model", "synthetic-tiny", "--batch", "1-8+2", "--threads", "1-16*2", "--tokens", "8",
                     "--dry-run", "--db", str(tmp_path / "lab.sqlite"))
    cells = [line.split()[3:7] for line in run.out.splitlines()]  # "cpu stock fp32 batch B T thr ..."
    assert [(int(c[1]), int(c[2])) for c in cells] == [(b, t) for t in (1, 2, 4, 8, 16) for b in (1, 3, 5, 7)]
    assert "20 cell(s)" in run.err


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: bundles across machines: test_browser_benchmark's compare via a bundle
def test_lab_engine_export_import_and_compare_across_two_machines(tmp_path, capsys):
    mine, theirs = tmp_path / "mine.sqlite", tmp_path / "theirs.sqlite"
    run = bench(*FAST, "--engine", "stock,lab", "--db", str(mine), "--out", str(tmp_path / "out"), "--format", "json")
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
    assert [(c["engine"], c["status"]) for c in cells] == [("stock", "ok"), ("lab", "ok")], run.stderr[-2000:]
    # two cells: interleaved in 3 passes by default (one timed call each), --repeats applies with --passes 1
    assert all(c["step_ms"] > 0 and c["repeats"] == c["passes"] == 3 for c in cells)

    bundle = tmp_path / "mine.json"
    bench_here(capsys, "--export", str(bundle), "--sweeps", "1", "--db", str(mine))
    data = json.loads(bundle.read_text())
    assert data["format"] == "chattts-lab-bundle" and len(data["sweeps"]) == 1
    (sweep,) = data["sweeps"]
    assert [(c["config"]["engine"], c["status"]) for c in sweep["cells"]] == [("stock", "ok"), ("lab", "ok")]
    assert all(len([s for s in c["samples"] if s["phase"] == "timed"]) == 3 for c in sweep["cells"])

    # Another machine: the same grid measured twice as slow (its bundle, with its own identity).
    other = json.loads(bundle.read_text())
    other["sweeps"][0].update(uuid="another-machine", environment={**sweep["environment"], "hostname": "slow-box",
                                                                   "cpu": {"model": "Slow CPU", "usable_cores": 1}})
    for cell in other["sweeps"][0]["cells"]:
        cell["latency"] = {k: v * 2 if k != "count" else v for k, v in cell["latency"].items()}
    other_path = tmp_path / "theirs.json"
    other_path.write_text(json.dumps(other))
    bench_here(capsys, "--import", str(bundle), "--db", str(theirs))
    bench_here(capsys, "--import", str(other_path), "--db", str(theirs))

    rows = markdown_rows(bench_here(capsys, "--compare", "1,2", "--db", str(theirs)).out)
    assert [r["engine"] for r in rows] == ["lab", "stock"]
    mine_col = next(k for k in rows[0] if k.startswith("1: "))
    theirs_col = next(k for k in rows[0] if k.startswith("2: "))
    assert "Slow CPU" in theirs_col and "Slow CPU" not in mine_col
    for r in rows:
        assert float(r[theirs_col]) == pytest.approx(2 * float(r[mine_col]), rel=2e-3)  # 4 significant digits


def test_a_failed_cell_keeps_its_traceback_in_the_store_the_bundle_and_the_json_report(tmp_path, caplog):
    missing = tmp_path / "no-such-model"
    cfg = RunConfig(str(missing), "cpu", "fp32", 1, 1, 8, warmup=0, repeats=1, min_time_s=0.0)
    with caplog.at_level(logging.WARNING, logger="chattts_lab.sweep.runner"):
        result = run_cell(cfg)
    assert result.status == "error" and f"model folder {missing} does not exist" in result.reason
    assert result.traceback.startswith("Traceback (most recent call last):")
    assert "chattts_lab/models.py" in result.traceback and "ModelUnavailable" in result.traceback
    assert any(r.levelno == logging.WARNING and result.traceback in r.getMessage() for r in caplog.records)

    db = tmp_path / "lab.sqlite"
    with Store(db) as store:
        sid = store.create_sweep({}, {"hostname": "here"})
        store.add_cell(sid, 0, result)
        (stored,) = store.results(sid)
    assert stored.traceback == result.traceback
    bundle = json.loads(export_bundle(db, tmp_path / "b.json").read_text())
    assert bundle["sweeps"][0]["cells"][0]["traceback"] == result.traceback
    paths = write_reports(results_frame([stored]), {}, [], tmp_path / "out", ("json",))
    assert json.loads(paths["json"].read_text())["cells"][0]["traceback"] == result.traceback
