"""Which configuration may replace the app's default after a sweep (chattts_lab.history.recommend.served_default), judged on
a real SQLite history: only one measured faster than the default, here, on the same model and device."""

from __future__ import annotations

from chattts_lab.history.recommend import served_default
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.history.frames import cells_frame, sweeps_frame
from chattts_lab.history.store import Store

DEFAULT = {"engine": "lab", "precision": "fp32", "device": "cpu", "threads": 2}
HERE = {"hostname": "here", "cpu": {"model": "EPYC", "usable_cores": 2}, "ram_gb": 24}


def cell(engine, precision, rtf, threads=2, batch=1, node=None, model="synthetic") -> CellResult:
    cfg = RunConfig(model, "cpu", precision, batch, threads, 32, engine)
    return CellResult(cfg, "ok", rtf=rtf, peak_rss_mb=1000.0, node={"label": node} if node else {})


def sweep(db, cells, model="synthetic", origin="local", drift=None, env=HERE) -> int:
    with Store(db) as store:
        sid = store.create_sweep({"model": model}, env, status="finished", origin=origin)
        for i, c in enumerate(cells):
            store.add_cell(sid, i, c)
        if drift is not None:
            store.set_note(sid, "drift", {"drift_pct": drift, "noisy": drift > 5.0})
    return sid


def pick(db, model="synthetic", default=DEFAULT):
    return served_default(cells_frame(db), sweeps_frame(db), model, default, lambda settings: None)


def test_a_slower_one_cell_sweep_leaves_the_default_and_says_why(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4)])
    sweep(db, [cell("stock", "fp32", 3.9, threads=1)])  # the one-cell sweep: slowest engine, one thread
    chosen = pick(db)
    assert chosen.settings == DEFAULT
    assert "is not faster than it (RTF 3.90 against 3.40 in this machine's history)" in chosen.reason


def test_a_faster_configuration_in_the_same_sweep_replaces_the_default(tmp_path):
    db = tmp_path / "lab.sqlite"
    sid = sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.63), cell("stock", "int8", 1.2),
                     cell("lab", "int8", 0.2, batch=4)])  # batch 4 is no answer for one person waiting
    chosen = pick(db)
    assert chosen.settings == {"engine": "lab", "precision": "int8", "device": "cpu", "threads": 2}
    assert "RTF 0.63 against 3.40 in the same sweep" in chosen.reason and f"sweep #{sid}" in chosen.reason


def test_a_later_int4_only_sweep_is_judged_against_the_default_measured_before(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4)])
    sweep(db, [cell("lab", "int4", 0.9)])
    chosen = pick(db)
    assert chosen.settings["precision"] == "int4" and "in this machine's history" in chosen.reason


def test_noisy_imported_ray_and_other_model_sweeps_do_not_count(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4)])
    sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.5)], origin="imported")
    sweep(db, [cell("lab", "fp32", 3.4, node="gpu-box"), cell("lab", "int8", 0.5, node="gpu-box")])
    assert pick(db).settings == DEFAULT  # neither the imported sweep nor the Ray node's cells count
    noisy = sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.5)], drift=29.6)
    chosen = pick(db)
    assert chosen.settings == DEFAULT and f"sweep #{noisy} was noisy (its passes drifted 29.6 %)" in chosen.reason
    tiny = sweep(db, [cell("lab", "fp32", 0.4, model="synthetic-tiny"), cell("lab", "int8", 0.1,
                                                                            model="synthetic-tiny")],
                 model="synthetic-tiny")
    assert f"sweep #{tiny} measured the model 'synthetic-tiny'" in pick(db).reason
    assert pick(db, model="synthetic-tiny").settings["precision"] == "int8"  # what a synthetic-tiny app goes by
