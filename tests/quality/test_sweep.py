"""`--quality` in a real sweep on tiny synthetic weights: the clips are spoken and scored, and every quality column
says it is not meaningful (no figure at all); the columns survive the store, a bundle and the reports."""

from __future__ import annotations

import json
import sqlite3

import pytest

from bench.cli import build_parser, spec_from_args
from chattts_lab.quality import FIGURE_COLUMNS, NOT_MEANINGFUL
from chattts_lab.history.report import markdown_report, results_frame
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.bundle import BundleError, export_bundle, import_bundle, read_bundle
from chattts_lab.history.frames import cells_frame
from chattts_lab.history.store import Store
from chattts_lab.sweep.runner import QualityFinished, SweepFinished, run_sweep
from tests.conftest import TINY


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    db = tmp_path_factory.mktemp("quality") / "lab.sqlite"
    spec = SweepSpec(model=TINY, precisions=("fp32",), tokens=(8,), threads=(1,), passes=1, repeats=1,
                     min_time_s=0.0, warmup=0, fidelity=False, quality=True)
    events = list(run_sweep(spec, db))
    return db, events


def test_the_cli_switch_sets_the_spec_and_is_off_by_default():
    assert spec_from_args(build_parser().parse_args(["--model", TINY, "--quality"])).quality is True
    assert spec_from_args(build_parser().parse_args(["--model", TINY])).quality is False


def test_a_quality_sweep_on_synthetic_weights_says_not_meaningful(swept):
    db, events = swept
    final = events[-1]
    assert isinstance(final, SweepFinished) and final.status == "finished"
    (scored,) = [e for e in events if isinstance(e, QualityFinished)]
    assert set(scored.columns) == {"cpu|stock|fp32"}
    assert len(final.results) == 1
    row = cells_frame(db).iloc[0]
    assert row["quality_note"] == NOT_MEANINGFUL and row["quality_clips"] == 6
    assert "speechmos" in row["quality_models"] and "pocketsphinx" in row["quality_models"]
    assert all(row[c] is None or row[c] != row[c] for c in FIGURE_COLUMNS)  # None or NaN: no number at all


def test_the_clips_were_really_scored_and_their_cost_kept(swept):
    db, _ = swept
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        note = store.notes(sweep["id"])["quality"]
    clips = note["records"]["cpu|stock|fp32"]["clips"]
    assert len(clips) == 6 and {c["length"] for c in clips} == {"short", "medium", "long"}
    assert all(set(c["cpu_s"]) >= {"dnsmos", "wer", "speaker"} for c in clips)  # every measure ran on every clip
    assert not any("dnsmos_ovrl" in c or "wer" in c for c in clips)  # and left no figure to misread
    assert note["failed"] == {} and note["by_length"] == []


def test_quality_columns_travel_in_bundles_and_reports(swept, tmp_path):
    db, _ = swept
    bundle = export_bundle(db, tmp_path / "bundle.json")
    other = tmp_path / "other.sqlite"
    (new,), _ = import_bundle(other, bundle)
    with Store(other) as store:
        (cell,) = store.results(new)
    assert cell.quality["quality_note"] == NOT_MEANINGFUL
    report = markdown_report(results_frame([cell]), {}, [])
    assert "## Quality (beside stock fp32)" in report and NOT_MEANINGFUL in report
    data = json.loads(bundle.read_text())
    data["sweeps"][0]["cells"][0]["quality"]["quality_mos"] = "4.5 (excellent)"
    bundle.write_text(json.dumps(data))
    with pytest.raises(BundleError, match="malformed quality"):
        read_bundle(bundle)


def test_cells_of_other_configurations_get_no_quality(swept):
    db, _ = swept
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        assert store.set_cell_quality(sweep["id"], {"cpu|lab|int8": {"quality_mos": 3.0}}) == 0
    assert sqlite3.connect(db).execute("SELECT quality_mos FROM cells").fetchall() == [(None,)]
