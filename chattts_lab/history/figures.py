"""The Benchmark tab's figures (and the MCP tools'): plots.py's df -> figure functions by name, the Pareto overlay,
and the one sentence over the plots that says what the sweep found."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import plotly.graph_objects as go

from chattts_lab.engines import REFERENCE
from chattts_lab.history import plots
from chattts_lab.history.compare import cell_ratio
from chattts_lab.history.recommend import pareto_mask
from chattts_lab.sweep.results import CellResult

# Rows are compared only when measured the same way apart from engine, precision and compile, and in one sweep
# (sweeps loaded together from the history may come from other machines or days).
COMPARABLE = ("sweep_id", "device", "batch_size", "threads", "tokens", "stream")


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


FIGURES = {"latency": plots.latency_vs_batch, "rtf": plots.rtf_by_precision,
           "pareto": throughput_vs_latency_pareto, "memory": plots.peak_memory, "roofline": plots.roofline_by_config}


def all_figures(df: pd.DataFrame, empty_note: str | None = None) -> dict[str, go.Figure]:
    """Every figure of `df`; with no rows at all, `empty_note` (when given) says what will appear there, and how."""
    figs = {name: make(df) for name, make in FIGURES.items()}
    if empty_note and len(df) == 0:
        for fig in figs.values():
            fig.layout.annotations = []
            fig.add_annotation(text=empty_note, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                               font=dict(size=14, color="#666"))
    return figs


def gain_sentence(df: pd.DataFrame, cells: Sequence[CellResult]) -> str:
    """How the fastest configuration compares with ChatTTS as shipped (stock fp32, no compile), in one sentence.

    `cells` are the rows of `df` in order (df's index is the position in it), with their raw timed calls: the
    ratio and its 95 % interval come from those (chattts_lab.history.compare.cell_ratio), so "no difference measured"
    is said when the interval contains 1. Only ok rows measured the same way (COMPARABLE) are compared; the pair
    with the largest gain in RTF (compute seconds per audio second) is named. Empty until a stock fp32 row and
    another ok row exist.
    """
    ok = df[(df["status"] == "ok") & df["rtf"].notna()] if len(df) else df
    if ok.empty or len(cells) != len(df):
        return ""
    engine, precision = REFERENCE
    is_base = (ok["engine"] == engine) & (ok["precision"] == precision) & ~ok["compile"].astype(bool)
    if not is_base.any():
        return "Add stock fp32 to the sweep to see the gain over ChatTTS as shipped."
    same = [c for c in COMPARABLE if c in ok]
    best = None
    for base_at, base in ok[is_base].iterrows():
        rivals = ok[~is_base & ok[same].eq(base[same]).all(axis=1)]
        if rivals.empty:
            continue
        fastest_at = rivals["rtf"].astype(float).idxmin()
        gain = float(base["rtf"]) / float(rivals.loc[fastest_at, "rtf"])
        if best is None or gain > best[0]:
            best = (gain, fastest_at, base_at)
    if best is None:
        return ""
    _, fastest_at, base_at = best
    fastest, base = df.loc[fastest_at], df.loc[base_at]
    positions = {label: i for i, label in enumerate(df.index)}
    name = f"{fastest['engine']} {fastest['precision']}" + (" compiled" if fastest["compile"] else "")
    where = f"on {base['machine']}" if base.get("machine") else "on this machine"  # sweeps loaded from the history
    ratio = cell_ratio(cells[positions[fastest_at]], cells[positions[base_at]])
    context = (f"{base['device']}, batch {int(base['batch_size'])}, {int(base['threads'])} threads, "
               f"{int(base['tokens'])} tokens" + (", streaming" if base["stream"] else ""))
    return (f"**{ratio.phrase(name, 'stock fp32')} {where}** (RTF {float(fastest['rtf']):.3g} vs "
            f"{float(base['rtf']):.3g}; {context}; RTF is compute seconds per audio second; the interval is from "
            f"the raw timed calls).")
