"""Every figure `python -m bench` prints says what it is: `--compare` names each ratio's configuration, once, in
its table's order, and refuses a sweep that is not there; help texts say their defaults once, readably."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import build_parser, main
from chattts_lab.sweep.results import CellResult, Latency, RunConfig
from chattts_lab.history.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _cell(precision: str, batch: int, walls: list[float]) -> CellResult:
    samples = tuple({"phase": "timed", "wall_s": w} for w in walls)
    return CellResult(RunConfig("synthetic", "cpu", precision, batch, 2, 32), "ok", samples=samples,
                      latency=Latency.from_values(walls))


def _two_sweeps(db) -> None:
    with Store(db) as store:
        for speed in (1.0, 2.0):  # the second sweep's calls take twice as long
            sid = store.create_sweep({"model": "synthetic"}, {"hostname": "here"}, status="finished")
            # stored out of the table's order (int8 before fp32, batch 4 before batch 1)
            for i, (precision, batch) in enumerate((("int8", 4), ("int8", 1), ("fp32", 1))):
                store.add_cell(sid, i, _cell(precision, batch, [speed * w for w in (1.0, 1.1, 0.9, 1.05)]))


def test_compare_names_the_configuration_of_each_ratio_once_in_the_tables_order(tmp_path, capsys):
    db = tmp_path / "lab.sqlite"
    _two_sweeps(db)
    assert main(["--compare", "1,2", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    ratios = [line for line in out.splitlines() if line.startswith("- ")]
    assert [r.split(":")[0] for r in ratios] == [  # the table's rows: precision, then batch
        "- cpu stock fp32 batch 1 2 thr 32 tok", "- cpu stock int8 batch 1 2 thr 32 tok",
        "- cpu stock int8 batch 4 2 thr 32 tok"]
    assert all("sweep 1 is 2x faster than sweep 2" in r or "sweep 2 is 2x slower" in r for r in ratios), ratios
    table_rows = [line for line in out.splitlines() if line.startswith("| stock")]
    assert [r.split("|")[3].strip() + r.split("|")[4].strip() for r in table_rows] == ["fp321", "int81", "int84"]


def test_compare_with_a_sweep_that_is_not_there_exits_non_zero_with_one_line(tmp_path, capsys):
    db = tmp_path / "lab.sqlite"
    _two_sweeps(db)
    assert main(["--compare", "2,99", "--db", str(db)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: no sweep 99 in {db} (python -m bench list shows them)"
    assert captured.out == ""


def test_repeats_that_an_interleaved_sweep_will_not_use_are_warned_about(tmp_path, capsys):
    grid = ["--model", "synthetic-tiny", "--tokens", "8", "--batch", "1,2", "--threads", "1", "--dry-run",
            "--db", str(tmp_path / "lab.sqlite")]
    assert main(grid + ["--repeats", "5", "--min-time", "2"]) == 0
    assert ("warning: repeats 5 and min time 2 s not used: this interleaved sweep times each cell once per pass, 3 "
            "timed calls in all") in capsys.readouterr().err
    assert main(grid + ["--repeats", "5", "--passes", "1"]) == 0  # back to back: repeats are what it uses
    assert main(grid + ["--repeats", "3"]) == 0  # the README's: as many calls as the passes make
    assert "warning: repeats" not in capsys.readouterr().err


def test_help_shows_defaults_as_they_are_typed_and_once():
    text = " ".join(build_parser().format_help().split())  # argparse wraps lines
    assert "cpu, cuda, cuda:N, mps (default: cpu)" in text and "('cpu',)" not in text
    assert "torch.compile off,on (default: off)" in text
    assert "(default: every usable core)" in text and "(default: None)" not in text
    assert "--fidelity-tokens FIDELITY_TOKENS audio tokens of the fidelity check's decode (default: 32)" in text


def test_every_command_prints_its_help(capsys):
    """A help text holding a bare % (the continuity limit's) once made `bench serve --help` a traceback."""
    for argv in (["--help"], ["serve", "--help"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--slo-continuity SLO_CONTINUITY ...and at least this % of streams" in text


def test_list_into_a_reader_that_stops_ends_without_a_traceback(tmp_path):
    with Store(tmp_path / "lab.sqlite"):
        pass
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--list", "--db", str(tmp_path / "lab.sqlite")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # `| head` that has read what it wanted: before this process even writes
    err = proc.communicate(timeout=300)[1].decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_back_to_back_cell_reports_one_pass():
    from chattts_lab.sweep.results import summarize

    samples = [{"phase": "timed", "wall_s": 1.0, "audio_s": 1.0, "decode_s": 0.5, "gpt_steps": 8, "tokens": [8]}] * 3
    assert summarize(RunConfig("synthetic-tiny", "cpu", "fp32", 1, 1, 8), "ok", "", {"samples": samples}).passes == 1


def test_the_batching_sentence_keeps_latencies_apart_and_counts_one_user():
    from bench.serving.summaries import batching_gain

    def level(max_batch, latency):
        return {"users": 1, "max_batch": max_batch, "ok": 4, "audio_s_per_s": 1.0 / latency,
                "latency_p90_s": latency, "ttfa_p90_s": 0.1, "ttfa_p99_s": 0.1, "ttfa_p50_s": 0.1}

    sentence = batching_gain([level(8, 0.42), level(1, 0.36)], 1)
    assert sentence.startswith("1 user at once") and "p90 latency 1.17x (0.42 s vs 0.36 s)" in sentence
