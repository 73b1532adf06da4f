"""Figures for the benchmark tab: the library's pure df -> figure functions, plus the Pareto overlay."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from chattts_lab import plots
from chattts_lab.recommend import pareto_mask


def throughput_vs_latency_pareto(df: pd.DataFrame) -> go.Figure:
    """plots.throughput_vs_latency with the Pareto front (nothing faster and higher at once) drawn as a line."""
    fig = plots.throughput_vs_latency(df)
    if len(df) == 0:
        return fig
    front = df[pareto_mask(df)].sort_values("latency_p50_s")
    if not front.empty:
        fig.add_trace(go.Scatter(x=front["latency_p50_s"], y=front["audio_s_per_s"], mode="lines+markers",
                                 name="Pareto front", line=dict(color="black", dash="dash", width=2),
                                 marker=dict(symbol="circle-open", size=16, color="black")))
    return fig


FIGURES = (plots.latency_vs_batch, plots.rtf_by_precision, throughput_vs_latency_pareto, plots.peak_memory)


def all_figures(df: pd.DataFrame) -> list[go.Figure]:
    return [make(df) for make in FIGURES]
