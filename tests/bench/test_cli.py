"""`python -m bench` end to end on tiny synthetic weights: real processes, real ChatTTS, a real database.

Also the crash-safety promise: kill a sweep mid-cell, find the finished cells kept and the sweep
marked interrupted, then `--resume` completes it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chattts_lab.history.frames import fidelity_frame
from chattts_lab.history.store import Store
from chattts_lab.sweep.results import CANONICAL_COLUMNS
from tests.support.cli import bench_here

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--model", "synthetic-tiny", "--tokens", "8", "--threads", "1", "--repeats", "2", "--min-time", "0",
        "--warmup", "0"]


def bench(*args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "batch size must be in 1..64, got 0"),
    (["--precision", "fp64"], "unknown precision 'fp64'"),
    (["--threads", "x"], "'x' is not a whole number"),
    (["--format", "pdf"], "unknown format pdf"),
])
def test_bad_input_exits_non_zero_with_a_clear_message(args, message, capsys):
    from bench.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args + ["--dry-run"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_absurd_grid_is_refused_unless_confirmed(capsys, tmp_path):
    from bench.cli import main

    big = ["--batch", "1-64", "--tokens", "2048", "--precision", "fp32,bf16,fp16,int8", "--db", str(tmp_path / "x.sqlite")]
    assert main(big + ["--dry-run"]) == 2
    assert "refusing a grid of 256 cells" in capsys.readouterr().err
    assert main(big + ["--dry-run", "--yes"]) == 0


def test_sweep_end_to_end_writes_every_format_and_keeps_impossible_cells(tmp_path, capsys):
    db, out = tmp_path / "lab.sqlite", tmp_path / "out"
    run = bench(*FAST, "--precision", "fp32,int4", "--device", "cpu,cuda:7", "--compile", "off,on",
                "--fidelity", "off", "--db", str(db), "--out", str(out), "--format", "md,csv,json,html")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| stock | cpu | fp32 | 1 | 1 | 8 | off | off | ok |" in run.stdout  # the markdown table at the end
    data = json.loads((out / "results.json").read_text())
    assert data["environment"]["cpu"]["logical_cores"] >= 1 and data["environment"]["versions"]["chattts"]
    cells = data["cells"]
    assert len(cells) == 2 * 2 * 2 and all(tuple(c) == CANONICAL_COLUMNS for c in cells)
    by_status = {}
    for c in cells:
        by_status.setdefault(c["status"], []).append(c)
    assert len(by_status["ok"]) == 1, cells
    assert {c["precision"] for c in by_status["unsupported"]} == {"int4"}  # lab-only, asked of stock
    ok = by_status["ok"][0]
    assert ok["repeats"] == 2 and 0 < ok["latency_p50_s"] and ok["latency_std_s"] >= 0
    assert ok["rtf"] == pytest.approx(ok["latency_p50_s"] / ok["audio_s"])
    assert ok["audio_s"] == pytest.approx((2 * 8 - 1) * 256 / 24000)
    assert ok["step_ms"] > 0 and ok["peak_rss_mb"] > 100 and ok["load_s"] > 0 and ok["cold_s"] > 0
    assert (ok["threads_effective"], ok["dtype_gpt"], ok["compile_effective"]) == (1, "float32", False)
    reasons = " ".join(c["reason"] for c in cells if c["status"] == "skipped")
    assert "not present" in reasons and "ignores compile" in reasons
    for fmt in ("md", "csv", "html"):
        assert (out / f"results.{fmt}").stat().st_size > 0
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        assert sweep["status"] == "finished"
        (measured,) = [r for r in store.results(sweep["id"]) if r.status == "ok"]
        assert [s["phase"] for s in measured.samples] == ["cold", "timed", "timed"]
        assert measured.extra["omp_num_threads"] == "1"
    assert "| finished |" in bench_here(capsys, "--list", "--db", str(db)).out


def _wait_for_cells(db: Path, n: int, proc: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before it could be killed"
        if db.exists():
            with Store(db) as store:
                sweeps = store.sweeps_list()
                if sweeps and store.count_cells(sweeps[0]["id"]) >= n:
                    return
        time.sleep(0.5)
    raise AssertionError("no cell finished in time")


def test_killed_sweep_keeps_finished_cells_and_resume_completes_it(tmp_path):
    db = tmp_path / "lab.sqlite"
    # --passes 1: each cell in its own process, committed as it ends (interleaved cells end together, at the last pass)
    args = [*FAST, "--precision", "fp32,bf16", "--stream", "--fidelity-tokens", "8", "--db", str(db), "--format", "json",
            "--out", str(tmp_path / "out"), "--passes", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_for_cells(db, 1, proc)
        os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: mid-way through the second cell
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with Store(db) as store:  # opening the store notices the dead owner
        (sweep,) = store.sweeps_list()
        assert sweep["status"] == "interrupted"
        kept = store.results(sweep["id"])
        assert [(r.config.precision, r.status) for r in kept] == [("fp32", "ok")]
        assert kept[0].latency.count == 2
    resumed = bench("--resume", "--db", str(db), "--out", str(tmp_path / "out"), "--format", "json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        assert sweep["status"] == "finished"
        results = store.results(sweep["id"])
        assert [(r.config.precision, r.status) for r in results] == [("fp32", "ok"), ("bf16", "ok")]
        assert results[0].to_dict() == kept[0].to_dict()  # the finished cell was not measured again
        streamed = results[1]
        assert streamed.config.stream and 0 < streamed.ttfa_s <= streamed.latency.max
    fid = fidelity_frame(db).set_index("precision")
    assert fid.loc["fp32", "token_match"] == 1.0  # the reference itself
    bf16 = fid.loc["bf16"]
    assert bf16["status"] == "ok" and bf16["dtype_gpt"] == "bfloat16" and "numerics only" in bf16["note"]
    assert 0 <= bf16["token_match"] <= 1 and 0 < bf16["hidden_rel_err"] < 0.1
