"""Figures for the benchmark tab: the library's pure df -> figure functions, the Pareto overlay, and the one
sentence over the plots that says what the sweep found."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from chattts_lab import plots
from chattts_lab.recommend import pareto_mask

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


def all_figures(df: pd.DataFrame) -> dict[str, go.Figure]:
    return {name: make(df) for name, make in FIGURES.items()}


def gain_sentence(df: pd.DataFrame) -> str:
    """How the fastest configuration compares with ChatTTS as shipped (stock fp32, no compile), in one sentence.

    Only ok rows measured the same way (COMPARABLE) are compared; the pair with the largest gain is named.
    RTF is compute seconds per audio second, so stock RTF / other RTF is how many times faster the other is.
    Empty until a stock fp32 row and another ok row exist.
    """
    ok = df[(df["status"] == "ok") & df["rtf"].notna()] if len(df) else df
    if ok.empty:
        return ""
    is_base = (ok["engine"] == "stock") & (ok["precision"] == "fp32") & ~ok["compile"].astype(bool)
    if not is_base.any():
        return "Add stock fp32 to the sweep to see the gain over ChatTTS as shipped."
    same = [c for c in COMPARABLE if c in ok]
    best = None
    for _, base in ok[is_base].iterrows():
        rivals = ok[~is_base & ok[same].eq(base[same]).all(axis=1)]
        if rivals.empty:
            continue
        fastest = rivals.loc[rivals["rtf"].astype(float).idxmin()]
        ratio = float(base["rtf"]) / float(fastest["rtf"])
        if best is None or ratio > best[0]:
            best = (ratio, fastest, base)
    if best is None:
        return ""
    ratio, fastest, base = best
    name = f"{fastest['engine']} {fastest['precision']}" + (" compiled" if fastest["compile"] else "")
    verdict = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"
    context = (f"{base['device']}, batch {int(base['batch_size'])}, {int(base['threads'])} threads, "
               f"{int(base['tokens'])} tokens" + (", streaming" if base["stream"] else ""))
    where = f"on {base['machine']}" if base.get("machine") else "on this machine"  # sweeps loaded from the history
    return (f"**{name} is {verdict} than stock fp32 {where}** (RTF {float(fastest['rtf']):.3g} vs "
            f"{float(base['rtf']):.3g}; {context}; RTF is compute seconds per audio second).")
