"""Which configuration may replace the app's default after a sweep (chattts_lab.recommend.faster_than_default),
judged on a real SQLite history: only one measured faster than the default, here, on the same model and device."""

from __future__ import annotations

from chattts_lab.recommend import faster_than_default
from chattts_lab.results import CellResult, RunConfig
from chattts_lab.store import Store, cells_frame, sweeps_frame

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


def pick(db, model="synthetic", default=DEFAULT, machine=None):
    return faster_than_default(cells_frame(db), sweeps_frame(db), model, default, machine)


def test_a_slower_one_cell_sweep_leaves_the_default_and_says_why(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4)])
    sweep(db, [cell("stock", "fp32", 3.9, threads=1)])  # the one-cell sweep: slowest engine, one thread
    rec = pick(db)
    assert rec.settings is None
    assert "The default (cpu · lab · fp32 · 2 threads) stays" in rec.reason and "more than 5% faster" in rec.reason


def test_a_faster_configuration_in_the_same_sweep_replaces_the_default(tmp_path):
    db = tmp_path / "lab.sqlite"
    sid = sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.63), cell("stock", "int8", 1.2),
                     cell("lab", "int8", 0.2, batch=4)])  # batch 4 is no answer for one person waiting
    rec = pick(db)
    assert rec.settings == {"engine": "lab", "precision": "int8", "device": "cpu", "threads": 2}
    assert "RTF 0.63 against 3.40 for the default" in rec.reason and f"sweep #{sid}" in rec.reason


def test_a_later_sweep_without_the_default_is_judged_against_the_default_measured_before(tmp_path):
    db = tmp_path / "lab.sqlite"
    first = sweep(db, [cell("lab", "fp32", 3.4)])
    sweep(db, [cell("lab", "int4", 0.9)])  # an int4-only sweep
    rec = pick(db)
    assert rec.settings["precision"] == "int4" and f"the default in sweep #{first}" in rec.reason


def test_a_default_never_measured_here_stays(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("stock", "int8", 1.2)])
    rec = pick(db)
    assert rec.settings is None and "no usable sweep on this machine measured it" in rec.reason


def test_noisy_imported_ray_and_other_model_sweeps_do_not_count(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4)])
    noisy = sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.5)], drift=29.6)
    imported = sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.5)], origin="imported")
    ray = sweep(db, [cell("lab", "fp32", 3.4, node="gpu-box"), cell("lab", "int8", 0.5, node="gpu-box")])
    tiny = sweep(db, [cell("lab", "fp32", 0.4, model="synthetic-tiny"),
                      cell("lab", "int8", 0.1, model="synthetic-tiny")], model="synthetic-tiny")
    rec = pick(db)
    assert rec.settings is None
    for reason in (f"sweep #{noisy} was noisy (29.6 % drift", f"sweep #{imported} was imported from another machine",
                   f"sweep #{ray} ran on Ray nodes", f"sweep #{tiny} measured model synthetic-tiny, not synthetic"):
        assert reason in rec.reason
    # the same tiny sweep is what a synthetic-tiny app goes by
    assert pick(db, model="synthetic-tiny").settings["precision"] == "int8"


def test_a_sweep_of_another_machine_does_not_count_when_the_machine_is_given(tmp_path):
    db = tmp_path / "lab.sqlite"
    sweep(db, [cell("lab", "fp32", 3.4), cell("lab", "int8", 0.6)], env={**HERE, "cpu": {"model": "Xeon"}})
    here = sweeps_frame(db)["machine"].iloc[0]
    assert pick(db, machine=here).settings is not None
    rec = pick(db, machine="EPYC x2, 24 GB, no GPU, torch None")
    assert rec.settings is None and "ran on another machine" in rec.reason
