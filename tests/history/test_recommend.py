"""Recommendation and Pareto front: pure functions over canonical rows, failed cells never recommended."""

import pandas as pd

from chattts_lab.history.recommend import pareto_mask, recommend
from chattts_lab.history.figures import throughput_vs_latency_pareto


def rows(*cells):
    base = dict(engine="stock", device="cpu", tokens=128, status="ok", reason="", step_ms=10.0, compile=False,
                stream=False)
    return pd.DataFrame([{**base, **c} for c in cells])


DF = rows(
    dict(precision="fp32", threads=2, batch_size=1, rtf=2.6, latency_p50_s=7.1, audio_s_per_s=0.38, peak_rss_mb=1720),
    dict(precision="int8", threads=2, batch_size=1, rtf=0.7, latency_p50_s=1.9, audio_s_per_s=1.4, peak_rss_mb=2540),
    dict(precision="bf16", threads=2, batch_size=1, rtf=1.3, latency_p50_s=3.6, audio_s_per_s=0.75, peak_rss_mb=1350),
    dict(precision="int8", threads=2, batch_size=4, rtf=1.1, latency_p50_s=2.9, audio_s_per_s=3.7, peak_rss_mb=2600),
    dict(precision="fp16", threads=2, batch_size=1, rtf=None, latency_p50_s=None, audio_s_per_s=None, peak_rss_mb=None,
         status="unsupported", reason="no fp16 kernels"),
)


def test_fastest_batch1_cell_within_budget_wins_with_a_reason():
    rec = recommend(DF, memory_budget_mb=4096)
    assert rec.settings == {"device": "cpu", "precision": "int8", "threads": 2, "engine": "stock"}
    assert "RTF 0.70" in rec.reason and "Next: cpu · stock · bf16" in rec.reason


def test_memory_budget_excludes_heavier_configurations():
    rec = recommend(DF, memory_budget_mb=2000)
    assert rec.settings["precision"] == "bf16"
    assert "Left out over the memory budget" in rec.reason and "int8" in rec.reason


def test_nothing_fits_or_nothing_ran_says_so():
    assert recommend(DF, memory_budget_mb=100).settings is None
    assert "No successful cells" in recommend(DF[DF["status"] != "ok"]).reason


def test_pareto_front_keeps_only_undominated_ok_cells():
    front = DF[pareto_mask(DF)]
    assert set(zip(front["precision"], front["batch_size"])) == {("int8", 1), ("int8", 4)}
    fig = throughput_vs_latency_pareto(DF)
    assert any(t.name == "Pareto front" for t in fig.data)
    assert "1 unsupported" in fig.layout.title.text  # the failed cell stays visible
