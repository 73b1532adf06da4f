"""The SQLite store, bundles between machines, and the report writers and plots over stored rows."""

import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from chattts_lab import metrics
from chattts_lab.history.report import FORMATS, results_frame, write_reports
from chattts_lab.history.bundle import BUNDLE_VERSION, BundleError, export_bundle, import_bundle
from chattts_lab.history.frames import cells_frame, compare_frame, sweeps_frame
from chattts_lab.history.price import COST_COLUMNS
from chattts_lab.history.schema import SCHEMA_VERSION
from chattts_lab.history.store import Store
from chattts_lab.sweep.results import CANONICAL_COLUMNS, CellResult, RunConfig, summarize
from chattts_lab.sweep.spec import SweepSpec

ENV = {"hostname": "machine-a", "cpu": {"model": "Test CPU", "usable_cores": 2, "flags": ["avx2"]}, "ram_gb": 8,
       "gpus": [], "versions": {"torch": "2.14.1"}, "blas": {}, "git": {"commit": "abc"}}


def _result(precision="fp32", batch=1, threads=1, wall=(1.0, 1.2, 1.1), status="ok", reason=""):
    cfg = RunConfig("synthetic-tiny", "cpu", precision, batch, threads, 16)
    audio = metrics.audio_seconds(16)
    samples = [{"phase": "cold", "wall_s": 3.0}] + [
        {"phase": "timed", "wall_s": w, "decode_s": w * 0.9, "gpt_steps": 16, "audio_s": audio,
         "peak_rss_mb": 500.0 + batch, "tokens": [16] * batch, "ttfa_s": None, "peak_device_mb": None} for w in wall]
    if status != "ok":
        return CellResult(cfg, status, reason)
    result = summarize(cfg, "ok", "", {"samples": samples, "load_s": 0.5, "effective": {
        "threads": threads, "dtype_gpt": "float32", "device": "cpu", "weight_bytes_per_step": 83e6}})
    return replace(result, mem_read_gbps=10.0)  # as a sweep attaches its bandwidth


def _fill(db, results, env=ENV):
    with Store(db) as store:
        sid = store.create_sweep(SweepSpec(model="synthetic-tiny").to_dict(), env)
        for i, r in enumerate(results):
            store.add_cell(sid, i, r)
        store.add_fidelity(sid, {"device": "cpu", "engine": "stock", "precision": "bf16", "status": "ok",
                                 "token_match": 0.5, "hidden_rel_err": 0.004})
        store.set_status(sid, "finished")
    return sid


def test_cells_are_kept_with_raw_samples_in_a_wal_database(tmp_path):
    db = tmp_path / "lab.sqlite"
    sid = _fill(db, [_result(), _result("bf16", status="unsupported", reason="because")])
    with Store(db) as store:
        back = store.results(sid)
        assert [r.status for r in back] == ["ok", "unsupported"]
        assert back[0].latency.p50 == pytest.approx(1.1)
        assert [s["phase"] for s in back[0].samples] == ["cold", "timed", "timed", "timed"]
        assert store.sweep(sid)["status"] == "finished"
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert conn.execute("SELECT rtf, status FROM cells ORDER BY idx").fetchall()[1] == (None, "unsupported")
    df = cells_frame(db)
    assert list(df.columns[3:]) == [*CANONICAL_COLUMNS, *COST_COLUMNS] and len(df) == 2  # failed cells stay visible
    assert sweeps_frame(db).loc[0, "n_ok"] == 1


def test_a_newer_schema_is_refused(tmp_path):
    db = tmp_path / "lab.sqlite"
    Store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(Exception, match="schema version 99"):
        Store(db)


def test_a_database_locked_past_the_timeout_says_so_not_that_it_is_foreign(tmp_path):
    db = tmp_path / "lab.sqlite"
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a long write
    try:
        with pytest.raises(Exception, match="stayed locked by another process"):
            Store(db, timeout_s=0.3)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    Store(db).close()  # and it opens once the lock is gone


# What each schema version added to the first release's file (tests/data/lab-schema-v1.sql). Two builds wrote 4:
# the roofline columns (released) and, in development, the interleaved-passes columns and notes table.
_SCHEMA_ADDITIONS = {
    "2": ['ALTER TABLE cells ADD COLUMN "memory_budget_mb" REAL'],
    "3": ['ALTER TABLE cells ADD COLUMN "traceback" TEXT'],
    "4-roofline": [f'ALTER TABLE cells ADD COLUMN "{c}" REAL'
                   for c in ("weight_mb_per_step", "mem_read_gbps", "floor_step_ms", "roofline")],
    "4-passes": ['ALTER TABLE cells ADD COLUMN "cpu_share" REAL', 'ALTER TABLE cells ADD COLUMN "passes" INTEGER',
                 "CREATE TABLE sweep_notes (sweep_id INTEGER NOT NULL, key TEXT NOT NULL, value_json TEXT NOT NULL,"
                 " PRIMARY KEY (sweep_id, key))"],
    "6": [f'ALTER TABLE cells ADD COLUMN "{c}" TEXT'
          for c in ("node", "node_id", "node_machine", "node_fingerprint", "kernels")],
}


_UPGRADE_STEPS = {"2": ["2"], "3": ["2", "3"], "4-roofline": ["2", "3", "4-roofline"],
                  "4-passes": ["2", "3", "4-passes"], "5": ["2", "3", "4-roofline", "4-passes"],
                  "6": ["2", "3", "4-roofline", "4-passes", "6"]}


@pytest.mark.parametrize("version", list(_UPGRADE_STEPS))
def test_a_database_of_every_older_schema_upgrades_keeping_its_rows(tmp_path, version):
    db = tmp_path / f"v{version}.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript((Path(__file__).resolve().parents[1] / "data" / "lab-schema-v1.sql").read_text())
        for step in _UPGRADE_STEPS[version]:
            for statement in _SCHEMA_ADDITIONS[step]:
                conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version[0],))
    before = sqlite3.connect(db).execute("SELECT cell_key, status, latency_p50_s FROM cells").fetchall()
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        store.add_cell(sweep["id"], 1, replace(_result("int8"), cpu_share=1.5, passes=3, mem_read_gbps=20.0,
                                               node={"label": "gpu-box", "node_id": "ab12"}))
        store.set_note(sweep["id"], "plan", "3 interleaved passes")
        assert store.notes(sweep["id"]) == {"plan": "3 interleaved passes"}
        new = next(r for r in store.results(sweep["id"]) if r.config.precision == "int8")
        assert (new.cpu_share, new.passes, new.mem_read_gbps) == (1.5, 3, 20.0)
        assert (new.row()["node"], new.row()["node_id"]) == ("gpu-box", "ab12")
        old = next(r for r in store.results(sweep["id"]) if r.config.precision != "int8")
        assert old.quality == {} and old.row()["quality_mos"] is None  # older rows: quality not measured
    conn = sqlite3.connect(db)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION) == "7" and meta["upgraded_from"] == version[0]
    assert set(CANONICAL_COLUMNS) - {"status"} <= {r[1] for r in conn.execute("PRAGMA table_info(cells)")}
    assert conn.execute("SELECT cell_key, status, latency_p50_s FROM cells WHERE idx != 1").fetchall() == before


def test_a_sweep_left_running_by_a_dead_process_is_marked_interrupted(tmp_path):
    db = tmp_path / "lab.sqlite"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Store(db) as store:
        sid = store.create_sweep({}, ENV)
        store.conn.execute("UPDATE sweeps SET pid = ? WHERE id = ?", (dead.pid, sid))
        store.conn.commit()
        live = store.create_sweep({}, ENV)  # this process: still running
    with Store(db) as store:
        assert store.sweep(sid)["status"] == "interrupted"
        assert store.sweep(live)["status"] == "running"


def test_bundle_round_trip_between_two_machines(tmp_path):
    db_a, db_b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    sid = _fill(db_a, [_result(), _result(batch=4), _result("int8", status="oom", reason="too big")])
    _fill(db_b, [_result(wall=(2.0, 2.0, 2.0)), _result(batch=4, wall=(3.0,))], env={**ENV, "hostname": "machine-b"})
    bundle = export_bundle(db_a, tmp_path / "a.json", [sid])
    new, skipped = import_bundle(db_b, bundle)
    assert len(new) == 1 and skipped == []
    with Store(db_a) as a, Store(db_b) as b:
        original, imported = a.results(sid), b.results(new[0])
        assert [r.to_dict() for r in original] == [r.to_dict() for r in imported]
        assert b.sweep(new[0])["environment"] == ENV and b.sweep(new[0])["origin"] == "imported"
        assert b.fidelity(new[0]) == a.fidelity(sid)
    assert import_bundle(db_b, bundle) == ([], [json.loads(bundle.read_text())["sweeps"][0]["uuid"]])
    side_by_side = compare_frame(db_b, [1, new[0]])
    assert len(side_by_side) == 2 and side_by_side.shape[1] == 8 + 2  # config keys + one column per sweep
    from chattts_lab.history.plots import compare_machines

    assert len(compare_machines(cells_frame(db_b)).data) == 2  # one bar series per sweep


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a JSON bundle"),
    (json.dumps({"format": "something-else", "version": 1, "sweeps": []}), "not a ChatTTS Lab bundle"),
    (json.dumps({"format": "chattts-lab-bundle", "version": BUNDLE_VERSION + 1, "sweeps": []}), "version"),
    (json.dumps({"format": "chattts-lab-bundle", "version": BUNDLE_VERSION, "sweeps": [{"uuid": "x"}]}), "spec"),
    (json.dumps({"format": "chattts-lab-bundle", "version": BUNDLE_VERSION, "sweeps": [
        {"uuid": "x", "spec": {}, "environment": {}, "fidelity": [], "cells": [{"status": "ok"}]}]}), "malformed"),
])
def test_corrupt_or_unknown_bundles_are_rejected_clearly(tmp_path, content, message):
    path = tmp_path / "bundle.json"
    path.write_text(content)
    with pytest.raises(BundleError, match=message):
        import_bundle(tmp_path / "lab.sqlite", path)
    with Store(tmp_path / "lab.sqlite") as store:
        assert store.sweeps_list() == []  # nothing half-imported


def test_reports_in_every_format(tmp_path):
    df = results_frame([_result(), _result(batch=4), _result("bf16", status="unsupported", reason="no bf16 here")])
    fid = [{"device": "cpu", "engine": "stock", "precision": "bf16", "status": "ok", "token_match": 0.5}]
    paths = write_reports(df, ENV, fid, tmp_path / "out", FORMATS, {"id": 1, "status": "finished"})
    data = json.loads(paths["json"].read_text())
    assert data["environment"] == ENV and len(data["cells"]) == 3
    assert data["cells"][0]["batch_size"] == 1 and data["cells"][2]["latency_p50_s"] is None
    assert "| unsupported |" in paths["md"].read_text() and "no bf16 here" in paths["md"].read_text()
    assert paths["csv"].read_text().splitlines()[0].split(",") == list(CANONICAL_COLUMNS)
    page = paths["html"].read_text()
    assert "Plotly.newPlot" in page and "Test CPU" in page and "no bf16 here" in page
    assert 'src="http' not in page  # plotly.js is inlined: readable offline


def test_plots_are_pure_functions_of_rows_and_show_failures():
    from chattts_lab.history import plots

    df = results_frame([_result(threads=1), _result(threads=2), _result(batch=4),
                        _result("int8", status="oom", reason="too big")])
    for make in plots.REPORT_FIGURES:
        fig = make(df)
        assert len(fig.data) >= 1
        assert "not plotted: 1 oom" in fig.layout.title.text
    failed_only = results_frame([_result(status="error", reason="boom")])
    fig = plots.latency_vs_batch(failed_only)
    assert fig.layout.annotations[0].text == "no successful cells to plot"
    lines = plots.latency_vs_batch(df)
    assert sorted(len(t.x) for t in lines.data) == [1, 2]  # 2 threads: 1 point; 1 thread: batches 1 and 4
