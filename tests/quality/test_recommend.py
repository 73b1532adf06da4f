"""The fastest configuration within a quality floor, and RTF against quality with its Pareto front: pure functions
of result rows (the quality columns of chattts_lab.quality), so these tests need no model."""

from __future__ import annotations

import pandas as pd

from chattts_lab.history.plots import rtf_vs_quality
from chattts_lab.quality import NOT_MEANINGFUL
from chattts_lab.history.recommend import recommend_within_quality


def rows(*configs) -> pd.DataFrame:
    """(engine, precision, rtf, mos, mos delta, wer %, wer delta) per configuration, ok at batch 1."""
    return pd.DataFrame([{"status": "ok", "device": "cpu", "engine": e, "precision": p, "threads": 2, "batch_size": 1,
                          "rtf": rtf, "peak_rss_mb": 1000.0, "quality_mos": mos, "quality_mos_delta": dm,
                          "quality_wer_pct": wer, "quality_wer_delta_pts": dw, "quality_speaker_sim": 0.9,
                          "quality_note": "", "quality_models": "mos: DNSMOS"} for e, p, rtf, mos, dm, wer, dw in configs])


STOCK = ("stock", "fp32", 3.4, 3.0, 0.0, 10.0, 0.0)


def test_the_fastest_within_the_floor_wins_and_faster_ones_below_it_are_named():
    df = rows(STOCK, ("lab", "int8", 0.4, 2.9, -0.1, 11.0, 1.0), ("lab", "int4", 0.3, 2.6, -0.4, 11.0, 1.0),
              ("onnx", "int4", 0.35, 2.95, -0.05, 15.0, 5.0))
    rec = recommend_within_quality(df)
    assert rec.settings == {"device": "cpu", "precision": "int8", "threads": 2, "engine": "lab"}
    assert rec.reason.startswith("**cpu · lab · int8 · 2 threads** is the fastest within 0.2 MOS and 2 points")
    assert "Faster but below the floor: cpu · lab · int4" in rec.reason and "onnx · int4" in rec.reason
    assert recommend_within_quality(df, mos_drop=0.5, wer_rise_pts=2).settings["precision"] == "int4"
    assert recommend_within_quality(df, mos_drop=0.01, wer_rise_pts=0.5).settings["engine"] == "stock"


def test_no_number_is_recommended_without_meaningful_quality():
    df = rows(STOCK).assign(quality_mos=None, quality_mos_delta=None, quality_wer_pct=None, quality_wer_delta_pts=None,
                            quality_note=NOT_MEANINGFUL)
    rec = recommend_within_quality(df)
    assert rec.settings is None and NOT_MEANINGFUL in rec.reason
    assert "--quality" in recommend_within_quality(rows(STOCK).drop(columns=["quality_mos_delta"])).reason
    fig = rtf_vs_quality(df)
    assert fig.layout.annotations[0].text == f"quality is {NOT_MEANINGFUL}" and not fig.data


def test_the_pareto_front_holds_the_configurations_nothing_beats_on_both():
    df = rows(STOCK, ("lab", "int8", 0.4, 2.9, -0.1, 11.0, 1.0), ("lab", "int4", 0.3, 2.6, -0.4, 11.0, 1.0),
              ("onnx", "int8", 0.5, 2.8, -0.2, 12.0, 2.0))  # slower and worse than lab int8: off the front
    fig = rtf_vs_quality(df)
    (front,) = [t for t in fig.data if t.name == "Pareto front"]
    assert list(front.x) == [0.3, 0.4, 3.4] and list(front.y) == [2.6, 2.9, 3.0]
    (wer_front,) = [t for t in rtf_vs_quality(df, "quality_wer_pct").data if t.name == "Pareto front"]
    assert list(wer_front.x) == [0.3, 3.4]  # lab int8 ties lab int4 on WER but is slower


def test_precision_by_length_takes_each_length_from_its_own_clips():
    from chattts_lab.history.recommend import precision_by_length

    df = rows(STOCK, ("lab", "int8", 0.4, 2.9, -0.1, 11.0, 1.0), ("lab", "int4", 0.3, 2.6, -0.4, 11.0, 1.0))
    by_length = [{"config": "cpu|stock|fp32", "length": "short", "quality_mos": 3.0, "quality_wer_pct": 10.0},
                 {"config": "cpu|lab|int8", "length": "short", "quality_mos": 2.95, "quality_wer_pct": 10.0},
                 {"config": "cpu|lab|int4", "length": "short", "quality_mos": 2.9, "quality_wer_pct": 11.0},
                 {"config": "cpu|stock|fp32", "length": "long", "quality_mos": 3.0, "quality_wer_pct": 10.0},
                 {"config": "cpu|lab|int8", "length": "long", "quality_mos": 2.9, "quality_wer_pct": 11.0},
                 {"config": "cpu|lab|int4", "length": "long", "quality_mos": 2.3, "quality_wer_pct": 20.0}]
    policy = {p["length"]: p for p in precision_by_length(df, by_length)}
    assert policy["short"]["config"] == "cpu|lab|int4"  # int4 holds up on short texts ...
    assert policy["long"]["config"] == "cpu|lab|int8"  # ... but not on long ones
    assert abs(policy["long"]["quality_mos_delta"] + 0.1) < 1e-9 and policy["long"]["rtf"] == 0.4
    assert precision_by_length(df, []) == []
