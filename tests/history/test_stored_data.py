"""Nothing stored is lost: a history, a bundle and a voice card that main at cdbcb55 wrote (tests/data/stored-cdbcb55,
made by tests/data/make_stored_fixtures.py) open, list, compare, report, import and resume with today's code.

No worker starts: the stopped sweep's pending cell asks for more threads than any machine has, so resuming it is
the rule table's row, and every other number is read from the files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from chattts_lab.history.compare import sweep_comparison
from bench.serving.loadtest import ServeSpec
from bench.serving.summaries import serving_frame
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.bundle import import_bundle, read_bundle
from chattts_lab.history.frames import sweeps_frame
from chattts_lab.history.schema import SCHEMA_VERSION
from chattts_lab.history.store import Store
from chattts_lab.voices import parse_card

STORED = Path(__file__).resolve().parents[1] / "data" / "stored-cdbcb55"


@pytest.fixture
def history(tmp_path) -> Path:
    db = tmp_path / "history.sqlite"
    shutil.copy(STORED / "history.sqlite", db)
    return db


def test_the_old_history_opens_and_lists_every_sweep_and_serving_run(history, capsys):
    with Store(history) as store:
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(
            SCHEMA_VERSION)
        sweeps = {s["id"]: s for s in store.sweeps_list()}
        finished = store.results(1)
    assert [(s["status"], s["spec"].get("kind", "sweep")) for s in sweeps.values()] == [
        ("finished", "serve"), ("cancelled", "sweep"), ("finished", "sweep")]
    assert SweepSpec.from_dict(sweeps[1]["spec"]).validate().passes == 2  # stored specs still validate
    assert SweepSpec.from_dict(sweeps[2]["spec"]).validate().passes == 1
    assert ServeSpec.from_dict(sweeps[3]["spec"]).validate().users == (1,)
    assert sorted(r.status for r in finished) == ["ok", "ok", "skipped", "skipped"]
    assert all(len([s for s in r.samples if s["phase"] == "timed"]) == 2 for r in finished if r.status == "ok")
    frame = sweeps_frame(history)
    assert list(frame["kind"]) == ["serve", "sweep", "sweep"] and frame["drift_pct"].notna().iloc[2]
    assert list(serving_frame(history)["users"]) == [1]
    assert main(["--list", "--db", str(history)]) == 0
    listed = capsys.readouterr().out
    assert "| 1 |" in listed and "| 3 |" in listed and "cancelled" in listed


def test_the_old_sweeps_compare_and_report_as_they_did(history, tmp_path, capsys):
    comparisons = sweep_comparison(history, 1)
    assert comparisons["drift"]["drift_pct"] is not None and len(comparisons["ratios"]) == 1
    assert comparisons["ratios"][0]["paired"]  # the two cells' passes pair up
    assert main(["--compare", "1,2", "--db", str(history)]) == 0
    assert "sweep 2" in capsys.readouterr().out  # fp32 at 1 thread ran in both: one ratio with its interval
    assert main(["--report", "1", "--db", str(history), "--out", str(tmp_path / "r"), "--format", "json"]) == 0
    report = json.loads((tmp_path / "r" / "results.json").read_text())
    assert len(report["fidelity"]) == 2 and report["comparisons"]["pass_orders"]


def test_the_stopped_sweep_resumes_to_finished(history, tmp_path):
    assert main(["--resume", "--db", str(history), "--out", str(tmp_path / "r"), "--format", "json"]) == 0
    with Store(history) as store:
        assert store.sweep(2)["status"] == "finished"
        assert sorted(r.status for r in store.results(2)) == ["ok", "skipped"]  # the old cell kept, one ruled


def test_the_old_bundle_reads_and_imports_once(tmp_path):
    data = read_bundle(STORED / "bundle.json")
    assert len(data["sweeps"]) == 3
    db = tmp_path / "other.sqlite"
    new, skipped = import_bundle(db, STORED / "bundle.json")
    assert len(new) == 3 and not skipped
    assert import_bundle(db, STORED / "bundle.json") == ([], [s["uuid"] for s in data["sweeps"]])
    with Store(db) as store:
        assert [s["origin"] for s in store.sweeps_list()] == ["imported"] * 3
        assert sum(len(store.results(i)) for i in new) == 5


def test_the_old_voice_card_reads_with_every_value():
    raw = (STORED / "voice-card.json").read_bytes()
    card = parse_card(raw)
    assert (card.name, card.seed, card.speed) == ("Fixture voice", 2222, 4)
    assert (card.sampling.temperature, card.sampling.top_k, card.sampling.audio_seed) == (0.5, 10, 7)
    assert (card.refine.enabled, card.refine.break_) == (True, 3)
    assert json.loads(card.to_json()) == json.loads(raw)  # written back, the same card


def test_the_history_subcommands_say_what_the_older_flags_say(history, tmp_path, capsys):
    """`python -m bench list | compare | report | export | import` (bench/history_cli.py) against --list, --compare,
    --report, --export and --import on the same stored history: the same output, the same files."""
    def said(argv: list[str]) -> str:
        capsys.readouterr()
        assert main(argv) == 0
        return capsys.readouterr().out

    db = str(history)
    assert said(["list", "--db", db]) == said(["--list", "--db", db])
    assert said(["--db", db, "list"]) == said(["--list", "--db", db])  # a --db before the command is kept
    assert said(["compare", "1,2", "--db", db]) == said(["--compare", "1,2", "--db", db])
    new, old = tmp_path / "new", tmp_path / "old"
    assert said(["report", "1", "--db", db, "--out", str(new), "--format", "md"]) == said(
        ["--report", "1", "--db", db, "--out", str(old), "--format", "md"])
    assert (new / "results.md").read_text() == (old / "results.md").read_text()
    assert main(["export", str(tmp_path / "one.json"), "--sweeps", "1", "--db", db]) == 0
    assert main(["import", str(tmp_path / "one.json"), "--db", str(tmp_path / "other.sqlite")]) == 0
    assert list(sweeps_frame(tmp_path / "other.sqlite")["id"]) == [1]
    assert main(["compare", "1,99", "--db", db]) == 1  # an unknown sweep: said, not a traceback
    with pytest.raises(SystemExit):
        main(["report", "--db", db])  # a report names its sweep
