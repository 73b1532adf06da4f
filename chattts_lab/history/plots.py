"""Pure functions that draw plotly Figures: over a sweep's canonical result rows (see
chattts_lab.sweep.results.CANONICAL_COLUMNS), and over a serving run's load levels and a capacity search's results.

Used by the HTML report and the app alike; testable without a browser. Only `ok` cells carry numbers
to plot; every figure says in its title how many cells were not ok, so failures stay visible (the
tables list them with their reasons). Every text a figure draws (titles, axis and legend titles, series
names, notes) goes through its `say` argument, an English text -> the text to draw: English by default,
the page's language in the app (webui/i18n/texts.py), so a template such as "{n} threads" is said
first and filled in after.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

# Raw column -> label shown to people. Logic never keys on labels.
LABELS = {
    "device": "device", "precision": "precision", "batch_size": "batch size", "threads": "threads",
    "tokens": "audio tokens", "engine": "engine", "latency_p50_s": "latency p50 (s)",
    "latency_std_s": "latency std (s)", "rtf": "RTF (wall s / audio s, one item)",
    "audio_s_per_s": "throughput (audio s / wall s)", "step_ms": "GPT ms / step",
    "peak_rss_mb": "peak RSS (MB)", "peak_device_mb": "peak device memory (MB)", "series": "configuration",
    "machine": "machine", "ttfa_s": "time to first audio (s)",
    "roofline": "roofline (floor ms / step ms; 1 = at the floor)", "floor_step_ms": "floor: weights / bandwidth (ms)",
    "weight_mb_per_step": "weights read per step (MB)", "mem_read_gbps": "read bandwidth (GB/s)",
}
CONFIG_KEYS = ["engine", "device", "precision", "threads", "tokens", "compile", "stream"]

Say = Callable[[str], str]


def english(text: str) -> str:
    return text


def said(labels: dict, say: Say) -> dict:
    return {column: say(label) for column, label in labels.items()}


def _ok(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The ok rows, and a note naming how many cells of each other status are not plotted."""
    ok = df[df["status"] == "ok"].copy() if len(df) else df.copy()
    others = df.loc[df["status"] != "ok", "status"].value_counts() if len(df) else pd.Series(dtype=int)
    return ok, ", ".join(f"{n} {status}" for status, n in others.items())


def _title(text: str, not_ok: str, say: Say = english) -> str:
    """`text` (said already) with a line under it naming the cells not plotted."""
    if not not_ok:
        return text
    return f"{text}<br><sup>{say('not plotted: {not_ok} (see the table for reasons)').format(not_ok=not_ok)}</sup>"


def empty(title: str, not_ok: str, text: str = "no successful cells to plot", say: Say = english) -> go.Figure:
    """A figure with nothing to draw: its title and a note saying why (both in English, said by `say`)."""
    fig = go.Figure()
    fig.add_annotation(text=say(text), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=_title(say(title), not_ok, say), xaxis_visible=False, yaxis_visible=False)
    return fig


def series_label(row: pd.Series, keys: list[str] | None = None, say: Say = english) -> str:
    """A short name for one line of a plot: only the settings that vary are worth naming."""
    keys = keys or ["engine", "device", "precision", "threads", "tokens"]
    parts = []
    for k in keys:
        v = row[k]
        parts.append(say("{n} thr").format(n=v) if k == "threads" else say("{n} tok").format(n=v) if k == "tokens"
                     else str(v))
    return " ".join(parts)


def _with_series(ok: pd.DataFrame, exclude: tuple[str, ...], say: Say = english) -> pd.DataFrame:
    varying = [k for k in CONFIG_KEYS if k not in exclude and k in ok and ok[k].nunique() > 1]
    ok["series"] = ok.apply(lambda r: series_label(r, varying or ["precision"], say), axis=1)
    return ok


def _by_batch(ok: pd.DataFrame, label: str, say: Say) -> pd.DataFrame:
    """Rows for a figure that groups by batch size: a series for what else varies, and the batch as a label
    (`label`: a template of {batch})."""
    ok = _with_series(ok, ("batch_size",), say)
    ok["batch_label"] = ok["batch_size"].map(lambda batch: say(label).format(batch=batch))
    return ok


def _of_ok_cells(title: str):
    """Make `draw(ok, title, say)` a figure of a results frame: it draws the ok rows under a title that says what is
    not plotted, and a frame without an ok cell gets a figure saying so instead."""
    def figure_of(draw):
        def figure(df: pd.DataFrame, say: Say = english) -> go.Figure:
            ok, not_ok = _ok(df)
            return empty(title, not_ok, say=say) if ok.empty else draw(ok, _title(say(title), not_ok, say), say)

        figure.__name__, figure.__qualname__, figure.__doc__ = draw.__name__, draw.__qualname__, draw.__doc__
        return figure

    return figure_of


@_of_ok_cells("Latency vs batch size")
def latency_vs_batch(ok: pd.DataFrame, title: str, say: Say) -> go.Figure:
    """p50 latency of one call against batch size, one line per configuration, std as error bars."""
    ok = _with_series(ok, ("batch_size",), say).sort_values("batch_size")
    # the bar down stops at 0 s: a latency is never negative, however wide its spread
    ok["latency_down_s"] = ok[["latency_std_s", "latency_p50_s"]].min(axis=1)
    fig = px.line(ok, x="batch_size", y="latency_p50_s", error_y="latency_std_s", error_y_minus="latency_down_s",
                  color="series", markers=True, labels=said(LABELS, say), title=title)
    fig.update_xaxes(type="category")
    return fig


@_of_ok_cells("RTF by configuration and threads (below 1 is faster than real time)")
def rtf_by_precision(ok: pd.DataFrame, title: str, say: Say) -> go.Figure:
    """RTF (one item) per configuration (engine, precision, ... whatever varies besides threads and batch), bars
    grouped by thread count, one panel per batch size. One bar per cell: two engines never stack into one bar."""
    ok = _with_series(ok, ("threads", "batch_size"), say).sort_values(["batch_size", "threads"])
    ok["threads_label"] = ok["threads"].map(lambda n: say("{n} threads").format(n=n))
    fig = px.bar(ok, x="series", y="rtf", color="threads_label", barmode="group", facet_col="batch_size",
                 labels=said({**LABELS, "threads_label": "threads"}, say), title=title,
                 hover_data=["engine", "tokens", "latency_p50_s", "step_ms"])
    fig.add_hline(y=1.0, line_dash="dot", annotation_text=say("real time"))
    return fig


@_of_ok_cells("Throughput vs latency")
def throughput_vs_latency(ok: pd.DataFrame, title: str, say: Say) -> go.Figure:
    """Aggregate throughput against latency: up and to the left is better; labels give the batch size."""
    ok = _by_batch(ok, "b{batch}", say)
    fig = px.scatter(ok, x="latency_p50_s", y="audio_s_per_s", color="series", text="batch_label",
                     labels=said(LABELS, say), title=title, hover_data=["batch_size", "rtf", "step_ms"])
    fig.update_traces(textposition="top center", marker_size=10)
    return fig


@_of_ok_cells("Peak memory during inference")
def peak_memory(ok: pd.DataFrame, title: str, say: Say) -> go.Figure:
    """Peak RSS during the timed calls per configuration (and peak device memory where there is one)."""
    ok = _by_batch(ok, "batch {batch}", say)
    value = "peak_device_mb" if ok["peak_device_mb"].notna().any() and (ok["device"] != "cpu").all() else "peak_rss_mb"
    return px.bar(ok, x="series", y=value, color="batch_label", barmode="group",
                  labels=said({**LABELS, "batch_label": "batch"}, say), title=title)


def compare_machines(df: pd.DataFrame, metric: str = "latency_p50_s", say: Say = english) -> go.Figure:
    """The same configurations on several sweeps (machines) side by side; needs a `machine` column."""
    title = say("{metric} by machine").format(metric=say(LABELS.get(metric, metric)))
    ok, not_ok = _ok(df)
    if ok.empty or "machine" not in ok:
        return empty(title, not_ok, say=say)
    ok["config"] = ok.apply(lambda r: series_label(r, ["engine", "precision", "threads", "tokens"], say)
                            + f" b{r['batch_size']}", axis=1)
    ok["sweep"] = ok["sweep_id"].astype(str) + ": " + ok["machine"].astype(str) if "sweep_id" in ok else ok["machine"]
    labels = said({**LABELS, "config": "config", "sweep": "sweep"}, say)  # the English axis and legend names
    return px.bar(ok, x="config", y=metric, color="sweep", barmode="group", labels=labels,
                  title=_title(title, not_ok, say))


def roofline_by_config(df: pd.DataFrame, say: Say = english) -> go.Figure:
    """How close each configuration's GPT step comes to the memory-bandwidth floor, one bar per cell.

    One fraction per configuration on a 0-1 axis, with the floor drawn at 1, answers "how far from what my
    memory allows?" at a glance and sorts like any bar chart; step ms against weight MB with a bandwidth
    line says the same but needs log axes and reading the gap off a slope. The hover gives the numbers.
    """
    title = "Distance from the memory-bandwidth floor (1 = a GPT step as fast as reading its weights allows)"
    ok, not_ok = _ok(df)
    if ok.empty:
        return empty(title, not_ok, say=say)
    ok = ok[ok["roofline"].notna()].copy()
    if ok.empty:  # sweeps recorded before the bandwidth was measured
        return empty(title, not_ok, "no cell has a roofline: this sweep did not measure the memory bandwidth", say)
    ok = _by_batch(ok, "batch {batch}", say)
    fig = px.bar(ok.sort_values("roofline"), x="roofline", y="series", color="batch_label", barmode="group",
                 orientation="h", labels=said({**LABELS, "batch_label": "batch"}, say),
                 title=_title(say(title), not_ok, say),
                 hover_data=["step_ms", "floor_step_ms", "weight_mb_per_step", "mem_read_gbps"])
    fig.add_vline(x=1.0, line_dash="dot", annotation_text=say("floor"))
    fig.update_xaxes(range=[0, max(1.05, float(ok["roofline"].max()) * 1.05)])
    return fig


REPORT_FIGURES = (latency_vs_batch, rtf_by_precision, throughput_vs_latency, peak_memory, roofline_by_config)


# ------------------------------------------------------------------------------------------------
# The serving benchmark: one row per load level (bench.serving.summaries.serving_frame)

SERVING_LABELS = {"users": "concurrent users", "latency_p90_s": "latency p90 (s, queue included)",
                  "audio_s_per_s": "audio seconds per wall second (all users)", "value": "seconds",
                  "series": "app (max batch)", "measure": "measure"}


def _serving_series(levels: pd.DataFrame, say: Say) -> pd.DataFrame:
    closed = levels[levels["users"].notna() & (levels["ok"] > 0)].copy()
    many_runs = closed["sweep_id"].nunique() > 1
    closed["series"] = closed.apply(
        lambda r: (f"#{r['sweep_id']} " if many_runs else "")
        + (say("one at a time") if r["max_batch"] == 1 else say("as the app runs") if r["max_batch"] == 0
           else say("batches of up to {size}").format(size=r["max_batch"])), axis=1)
    return closed.sort_values("users")


def serving_latency(levels: pd.DataFrame, say: Say = english) -> go.Figure:
    """Latency p90 and time to first audio p90 against concurrent users, one line pair per app setting."""
    title = "Latency and time to first audio vs users"
    closed = _serving_series(levels, say) if len(levels) else levels
    if closed.empty:
        return empty(title, "", "no closed-loop levels to plot", say)
    long = closed.melt(id_vars=["users", "series"], value_vars=["latency_p90_s", "ttfa_p90_s"], var_name="measure")
    long["measure"] = long["measure"].map({"latency_p90_s": say("latency p90"), "ttfa_p90_s": say("first audio p90")})
    fig = px.line(long, x="users", y="value", color="series", line_dash="measure", markers=True,
                  labels=said(SERVING_LABELS, say), title=say(title))
    fig.update_xaxes(type="category")
    return fig


def serving_throughput(levels: pd.DataFrame, say: Say = english) -> go.Figure:
    """Audio made per wall second by all users together, against concurrent users."""
    title = "Throughput vs users"
    closed = _serving_series(levels, say) if len(levels) else levels
    if closed.empty:
        return empty(title, "", "no closed-loop levels to plot", say)
    fig = px.line(closed, x="users", y="audio_s_per_s", color="series", markers=True,
                  labels=said(SERVING_LABELS, say), title=say(title))
    fig.update_xaxes(type="category")
    return fig


CAPACITY_LABELS = {"users": "concurrent streams (closed-loop users)", "ttfa_p99_s": "p99 first audio (s)",
                   "series": "scheduling", "held": "service level", "continuity_pct": "continuity %"}


def capacity_curve(results: list[dict], say: Say = english) -> go.Figure:
    """A capacity search's levels: p99 time to first audio against users, one line per scheduling, each level
    marked held or broken, the service level's limit drawn; each line's name says how many streams it holds."""
    title = "Capacity: p99 first audio vs real-time streams"
    points = [{"users": c["users"], "ttfa_p99_s": c["ttfa_p99_s"], "held": say("held" if c["held"] else "broke"),
               "continuity_pct": c["continuity_pct"],
               "series": say("{scheduling} ({streams} held)").format(scheduling=say(r["batching"] or "the app"),
                                                                     streams=r["streams"])}
              for r in results for c in r.get("curve") or []]
    if not points:
        return empty(title, "", "tick 'Find capacity' and run: each level tried appears here", say)
    fig = px.line(pd.DataFrame(points), x="users", y="ttfa_p99_s", color="series", symbol="held", markers=True,
                  hover_data=["continuity_pct"], title=say(title), labels=said(CAPACITY_LABELS, say))
    fig.add_hline(y=results[0]["slo_ttfa_p99_s"], line_dash="dot", annotation_text=say("first-audio limit"))
    return fig


# ------------------------------------------------------------------------------------------------
# Speed and quality in one picture (quality columns: chattts_lab.quality)

QUALITY_LABELS = {"quality_mos": "predicted MOS (DNSMOS overall; higher is better)",
                  "quality_wer_pct": "WER % (lower is better)", "quality_speaker_sim": "speaker similarity to stock fp32"}


def rtf_vs_quality(df: pd.DataFrame, quality: str = "quality_mos", say: Say = english) -> go.Figure:
    """RTF against a quality figure, one point per configuration (batch 1 where measured), the Pareto front drawn:
    the configurations no other beats on both speed and quality. Across machines, each machine is its own series."""
    from chattts_lab.history.recommend import pareto_mask, quality_pool, why_no_quality

    title = say("RTF vs {quality}").format(quality=say(QUALITY_LABELS.get(quality, quality)))
    _, not_ok = _ok(df)
    pool = quality_pool(df)
    pool = pool[pool[quality].notna()] if quality in pool else pool
    if pool.empty:
        return empty(title, not_ok, why_no_quality(df), say)
    pool = pool.drop_duplicates([k for k in ("machine", "engine", "device", "precision") if k in pool]).copy()
    pool["series"] = pool.apply(lambda r: series_label(r, ["engine", "device", "precision"], say), axis=1)
    higher_better = quality != "quality_wer_pct"
    score = pool[quality] if higher_better else -pool[quality]
    pool["front"] = pareto_mask(pool.assign(_score=score), x="rtf", y="_score")
    fig = px.scatter(pool, x="rtf", y=quality, color="machine" if pool.get("machine", pd.Series()).nunique() > 1
                     else "series", symbol="series", hover_data=["quality_mos_delta", "quality_wer_delta_pts"],
                     labels=said({**LABELS, **QUALITY_LABELS}, say), title=_title(title, not_ok, say))
    front = pool[pool["front"]].sort_values("rtf")
    fig.add_trace(go.Scatter(x=front["rtf"], y=front[quality], mode="lines", name=say("Pareto front"),
                             line={"dash": "dot", "color": "#444"}))
    fig.update_xaxes(autorange="reversed", title=say("RTF (lower is faster; faster to the right)"))
    return fig
