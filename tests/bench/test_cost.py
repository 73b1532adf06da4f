"""Cost per audio hour beside speed: one formula (chattts_lab.metrics), a machine price kept with each run (a sweep
note: no new column, so older histories read as before), shown by `python -m bench`, its reports, the capacity
result, the history, bundles and the app's `/run_sweep` table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from chattts_lab import metrics
from chattts_lab.history.bundle import BundleError, export_bundle, import_bundle
from chattts_lab.history.frames import cells_frame
from chattts_lab.history.price import MachinePrice
from chattts_lab.history.store import Store, save_price
from bench.serving.capacity import capacity_cost, capacity_frame
from tests.support.cli import bench_here

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "tests" / "data" / "stored-cdbcb55"
FAST = ["--model", "synthetic-tiny", "--tokens", "8", "--threads", "1", "--repeats", "1", "--min-time", "0",
        "--warmup", "0", "--passes", "1", "--fidelity", "off"]


def test_the_issues_example_a_0_067_dollar_box_at_rtf_0_26_costs_about_0_017_per_audio_hour():
    assert metrics.usd_per_audio_hour(0.067, 1 / 0.26) == pytest.approx(0.0174, abs=1e-4)
    assert metrics.usd_per_audio_hour(0.067, 0) is None and metrics.usd_per_audio_hour(None, 3.0) is None
    assert metrics.usd_per_audio_hour(2.0, 4) == 0.5  # 4 real-time streams: 4 audio hours an hour


@pytest.mark.parametrize("price", [-1, 0.0 - 1e-9, float("nan"), float("inf")])
def test_a_price_that_is_not_a_positive_number_is_refused(price):
    with pytest.raises(ValueError, match="positive number of dollars per hour"):
        MachinePrice(price)


def test_bench_prints_and_reports_dollars_per_audio_hour_with_the_price_and_its_source(tmp_path, capsys):
    db, out = tmp_path / "lab.sqlite", tmp_path / "out"
    printed = bench_here(capsys, *FAST, "--db", str(db), "--out", str(out), "--format", "md,html,json",
                         "--price", "0.067", "--price-source", "a test's made-up list price").out
    (row,) = cells_frame(db).to_dict("records")
    assert row["usd_per_audio_hour"] == pytest.approx(0.067 / row["audio_s_per_s"])
    assert row["price_source"] == "a test's made-up list price"
    header = next(line for line in printed.splitlines() if line.startswith("| engine"))
    assert "| audio_s_per_s | usd_per_audio_hour |" in header
    assert "Machine price $0.067 per hour (source: a test's made-up list price)" in printed
    for name in ("results.md", "results.html"):
        text = (out / name).read_text()
        assert "usd_per_audio_hour" in text and "made-up list price" in text
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["usd_per_audio_hour"] == pytest.approx(row["usd_per_audio_hour"])
    listed = bench_here(capsys, "--list", "--db", str(db)).out.splitlines()
    assert listed[0].endswith("| noisy | usd_per_hour |") and listed[2].endswith("| 0.067 |")


def test_an_older_history_reads_as_before_and_takes_a_price_later(tmp_path, capsys):
    db = tmp_path / "history.sqlite"
    shutil.copy(STORED / "history.sqlite", db)
    before = cells_frame(db)
    assert before["usd_per_audio_hour"].isna().all()  # no price: the column is empty, and tables leave it out
    sweep_id = int(before["sweep_id"].iloc[0])
    run = bench_here(capsys, "--db", str(db), "--report", str(sweep_id), "--out", str(tmp_path / "r"), "--format", "md",
                     "--price", "1.5", "--price-source", "an invoice")
    after = cells_frame(db, [sweep_id])
    ok = after[after["audio_s_per_s"].notna()]
    assert not ok.empty and (ok["usd_per_audio_hour"] == 1.5 / ok["audio_s_per_s"]).all()
    assert "usd_per_audio_hour" in run.out and "source: an invoice" in run.out


def test_a_bundle_carries_the_price_to_another_machine_and_a_malformed_one_is_refused(tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(STORED / "history.sqlite", a)
    sweep_id = int(cells_frame(a)["sweep_id"].iloc[0])
    save_price(a, sweep_id, MachinePrice(0.5, "their cloud bill"))
    bundle = export_bundle(a, tmp_path / "bundle.json", [sweep_id])
    (new,), _ = import_bundle(b, bundle)
    assert set(cells_frame(b, [new])["price_source"]) == {"their cloud bill"}
    data = json.loads(Path(bundle).read_text())
    data["sweeps"][0]["notes"]["price"] = {"usd_per_hour": "cheap", "source": "?"}
    Path(bundle).write_text(json.dumps(data))
    with pytest.raises(BundleError, match="price note must hold a number"):
        import_bundle(tmp_path / "c.sqlite", bundle)


def test_a_capacity_costs_the_price_divided_by_the_streams_held(tmp_path):
    db = tmp_path / "lab.sqlite"
    result = {"batching": "continuous", "max_batch": 8, "streams": 3, "broke_at": 4, "broken_because": "p99",
              "config": "lab int8", "tokens": 256, "slo_ttfa_p99_s": 1.0, "slo_continuity_pct": 99.0, "curve": []}
    with Store(db) as store:
        sweep_id = store.create_sweep({"kind": "serve"}, {})
        store.set_note(sweep_id, "serving", {"levels": [], "requests": [], "capacity": [result, {**result, "streams": 0}]})
    assert capacity_frame(db).get("usd_per_audio_hour") is None  # no price: no cost
    price = MachinePrice(0.06, "a VM's list price")
    save_price(db, sweep_id, price)
    frame = capacity_frame(db)
    assert frame["usd_per_audio_hour"].iloc[0] == pytest.approx(0.02) and pd.isna(frame["usd_per_audio_hour"].iloc[1])
    assert "$0.02 per audio hour" in capacity_cost(result, price)
    assert "not one stream held" in capacity_cost({**result, "streams": 0}, price)


def test_the_apps_run_sweep_table_shows_dollars_per_audio_hour_when_given_a_price(app_url, app_dir):
    from gradio_client import Client

    table = Client(app_url, verbose=False).predict("cpu", "fp32", "1", "1", "8", 1, False, api_name="/run_sweep",
                                                   passes=1, price_usd_per_hour=0.067, price_source="a test")
    df = pd.DataFrame(table["data"], columns=table["headers"])
    (row,) = df.to_dict("records")
    assert row["usd_per_audio_hour"] == pytest.approx(0.067 / row["audio_s_per_s"], rel=1e-3)
    stored = cells_frame(app_dir / "history.sqlite", [int(row["sweep_id"])])
    assert set(stored["price_source"]) == {"a test"}


def test_a_price_kept_in_the_history_can_be_picked_again_and_fills_the_form(tmp_path):
    from webui.benchmark.tab import price_choices, saved_price_picked
    from chattts_lab.serve.context import AppContext
    from webui.benchmark.sweep_form import SweepControls

    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        first, second = store.create_sweep({}, {}), store.create_sweep({}, {})
    save_price(db, first, MachinePrice(0.067, "AWS list price"))
    save_price(db, second, MachinePrice(0.067, "AWS list price"))  # the same price twice is offered once
    (label, value), = price_choices(AppContext(history_db=db))
    assert label == "$0.067 per hour · AWS list price"
    controls = SweepControls({"price_usd_per_hour": "price box", "price_source": "source box"})
    assert saved_price_picked(controls, value) == {"price box": 0.067, "source box": "AWS list price"}
