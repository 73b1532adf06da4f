"""Sweep results as markdown, CSV, JSON and a self-contained HTML report (canonical snake_case columns)."""

from __future__ import annotations

import html
import json
import logging
import math
from pathlib import Path
from typing import Iterable

import pandas as pd

from chattts_lab.history.price import MachinePrice
from chattts_lab.sweep.results import CANONICAL_COLUMNS, CellResult

log = logging.getLogger(__name__)

FORMATS = ("md", "csv", "json", "html")
RESULTS_FORMAT = "chattts-lab-results"
RESULTS_VERSION = 1
# What the markdown table shows (every column is in the CSV/JSON).
TABLE_COLUMNS = ("engine", "device", "precision", "batch_size", "threads", "tokens", "compile", "stream", "status",
                 "latency_p50_s", "latency_std_s", "rtf", "audio_s_per_s", "usd_per_audio_hour", "step_ms", "floor_step_ms", "roofline",
                 "ttfa_s", "peak_rss_mb", "load_s", "cold_s", "passes", "cpu_share", "reason")
INT_COLUMNS = ("batch_size", "threads", "tokens", "repeats", "threads_effective", "passes")
# The quality section: one row per configuration (every cell of one carries the same figures).
QUALITY_TABLE_COLUMNS = ("engine", "device", "precision", "quality_mos", "quality_mos_delta", "quality_p808",
                         "quality_wer_pct", "quality_wer_delta_pts", "quality_speaker_sim", "quality_mel_db",
                         "quality_stoi", "quality_clips", "quality_note")
FIDELITY_COLUMNS = ("device", "engine", "precision", "status", "token_match", "first_divergence", "hidden_rel_err",
                    "hidden_rel_err_first_step", "dtype_gpt", "reason", "note")


def results_frame(results: Iterable[CellResult]) -> pd.DataFrame:
    """Canonical rows, failed cells included (their metrics are empty, their reason says why)."""
    df = pd.DataFrame([r.row() for r in results], columns=list(CANONICAL_COLUMNS))
    for col in INT_COLUMNS:  # whole numbers stay whole even where some cells have none
        df[col] = df[col].astype("Int64")
    return df


def quality_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration that was scored (empty when the sweep measured no quality)."""
    scored = df[df["quality_models"].notna() | df["quality_note"].notna()] if "quality_note" in df else df.iloc[:0]
    return scored.drop_duplicates(["engine", "device", "precision"])[list(QUALITY_TABLE_COLUMNS)]


def quality_lines(df: pd.DataFrame) -> list[str]:
    """What made the figures and what they are compared with (the models differ in what they can judge)."""
    scored = df[df["quality_models"].notna()] if "quality_models" in df else df.iloc[:0]
    if scored.empty:
        return []
    return ["Each configuration spoke the same fixed texts (short, medium, long) with the same voices and seeds as "
            "stock fp32 on its device; deltas are against that reference. WER is in percent.",
            f"Models: {scored['quality_models'].iloc[0]}"]


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v).replace("|", "/").replace("\n", " ")


def shown_columns(df: pd.DataFrame) -> tuple[str, ...]:
    """TABLE_COLUMNS, led by the cluster node when the rows come from a fleet sweep and by the kernels when one
    configuration was measured at several kernel levels (--kernel-level); the cost per audio hour only where a row
    has one (a price was given)."""
    priced = "usd_per_audio_hour" in df and df["usd_per_audio_hour"].notna().any()
    return ("node",) * bool("node" in df and df["node"].notna().any()) + ("kernels",) * _levels_differ(df) + tuple(
        c for c in TABLE_COLUMNS if priced or c != "usd_per_audio_hour")


def _levels_differ(df: pd.DataFrame) -> bool:
    """Whether rows of one configuration ran different kernels (the same cell at two kernel levels)."""
    keys = [c for c in ("node", "engine", "device", "precision", "batch_size", "threads", "tokens", "stream") if c in df]
    return bool("kernels" in df and keys and len(df) > 1
                and df.groupby(keys, dropna=False)["kernels"].nunique().gt(1).any())


def markdown_table(df: pd.DataFrame, columns: Iterable[str] | None = None) -> str:
    cols = [c for c in (shown_columns(df) if columns is None else columns) if c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines)


def environment_lines(env: dict) -> list[str]:
    cpu, v, blas, git = env.get("cpu", {}), env.get("versions", {}), env.get("blas", {}), env.get("git", {})
    gpus = "; ".join(f"{g['name']} ({g.get('memory_gb')} GB)" for g in env.get("gpus") or []) or "none"
    return [
        f"CPU: {cpu.get('model')} ({cpu.get('arch')}), {cpu.get('usable_cores')} usable / "
        f"{cpu.get('logical_cores')} logical cores; flags: {', '.join(cpu.get('flags') or []) or 'none of note'}",
        f"RAM: {env.get('ram_gb')} GB; GPUs: {gpus}",
        f"OS: {env.get('platform')}; host {env.get('hostname')}",
        "Software: " + ", ".join(f"{k} {val}" for k, val in v.items() if val),
        f"BLAS: {blas.get('blas')} (MKL {blas.get('mkl')}, oneDNN {blas.get('mkldnn')}, kernels "
        f"{blas.get('cpu_capability')}, threads {blas.get('parallel_backend')}, CUDA build {blas.get('cuda_build')})",
        f"Code: commit {git.get('commit')}{' (uncommitted changes)' if git.get('dirty') else ''}",
        f"Load average at start: {env.get('load_avg')}",
        *bandwidth_lines(env),
    ]


def comparison_lines(comparisons: dict | None) -> list[str]:
    """The plan, the drift sentence (NOISY when it is) and every ratio's phrase, one line each."""
    if not comparisons:
        return []
    lines = [comparisons["plan"]] if comparisons.get("plan") else []
    lines.append(comparisons["drift"]["sentence"])
    lines += [r["phrase"] for r in comparisons.get("ratios", [])]
    return lines


def passes_frame(comparisons: dict | None) -> pd.DataFrame:
    """Every cell's raw wall seconds per interleaved pass (one column per pass) and its CPU share."""
    rows = (comparisons or {}).get("passes", [])
    frame = pd.DataFrame([{"cell": r["cell"], "cpu_share": r["cpu_share"],
                           **{f"pass {int(p) + 1} s": w for p, w in r["wall_s_by_pass"].items()}} for r in rows])
    return frame


def bandwidth_lines(env: dict) -> list[str]:
    """The read bandwidth of each device, what `floor_step_ms` divides by: the sweep's one read; or the median of
    its reads at the start and before each interleaved pass; or, in a one-pass sweep, the read made just before
    each cell (its row's `mem_read_gbps`), of which the median is shown."""
    gbps, method = env.get("mem_read_gbps") or {}, env.get("mem_read_method") or {}
    reads = env.get("mem_read_gbps_reads") or {}
    per_cell = env.get("mem_read_before") == "cell"
    lines = []
    for device, value in gbps.items():
        line = f"Memory read bandwidth ({device}): {_fmt(value)} GB/s, {method.get(device, 'method not recorded')}"
        if len(reads.get(device) or []) > 1:
            line += (f"; the median of {len(reads[device])} such reads, at the start and before each "
                     f"{'cell' if per_cell else 'pass'}: {', '.join(_fmt(r) for r in reads[device])} GB/s")
            line += " (each row's floor uses the read just before its cell)" if per_cell else ""
        lines.append(line)
    return lines


def price_lines(df: pd.DataFrame) -> list[str]:
    """The machine price each priced row was costed at, and its source (one line per price)."""
    if "usd_per_hour" not in df:
        return []
    prices = df[df["usd_per_hour"].notna()].drop_duplicates(["usd_per_hour", "price_source"])
    return [MachinePrice(float(r.usd_per_hour), r.price_source).sentence() for r in prices.itertuples()]


def markdown_report(df: pd.DataFrame, env: dict, fidelity: list[dict], sweep: dict | None = None,
                    comparisons: dict | None = None) -> str:
    parts = ["# ChatTTS Lab benchmark", ""]
    if sweep:
        parts += [f"Sweep {sweep.get('id')} ({sweep.get('status')}), {sweep.get('created_at')}", ""]
    parts += ["## Environment", ""] + [f"- {line}" for line in environment_lines(env)] + [""]
    parts += ["## Results", "", markdown_table(df), ""] + [f"{line}\n" for line in price_lines(df)]
    if comparisons:
        parts += ["## Comparisons", ""] + [f"- {_fmt(line)}" for line in comparison_lines(comparisons)] + [""]
        raw = passes_frame(comparisons)
        if not raw.empty:
            parts += ["Raw passes (wall seconds of each timed call):", "", markdown_table(raw, raw.columns), ""]
    quality = quality_frame(df)
    if not quality.empty:
        parts += ["## Quality (beside stock fp32)", ""] + [f"- {line}" for line in quality_lines(df)] + [""]
        parts += [markdown_table(quality, QUALITY_TABLE_COLUMNS), ""]
    if fidelity:
        parts += ["## Fidelity (drift from fp32 stock)", "", markdown_table(pd.DataFrame(fidelity), FIDELITY_COLUMNS), ""]
    return "\n".join(parts)


def results_json(df: pd.DataFrame, env: dict, fidelity: list[dict], sweep: dict | None = None,
                 comparisons: dict | None = None) -> dict:
    cells = [{k: _json_value(v) for k, v in row.items()} for row in df.to_dict(orient="records")]
    return {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "sweep": sweep or {}, "environment": env,
            "cells": cells, "fidelity": fidelity, "comparisons": comparisons or {}}


def _json_value(v):
    if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    return v


def html_report(df: pd.DataFrame, env: dict, fidelity: list[dict], sweep: dict | None = None,
                comparisons: dict | None = None) -> str:
    """One self-contained page (plotly.js inlined once): environment, table, fidelity, figures."""
    from chattts_lab.history.plots import REPORT_FIGURES, rtf_vs_quality  # imports plotly (seconds): only when a page is written

    quality = quality_frame(df)
    figures = []
    for i, make in enumerate(REPORT_FIGURES + ((rtf_vs_quality,) if not quality.empty else ())):
        fig = make(df)
        figures.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), default_width="100%",
                                   default_height="480px"))
    table = df[[c for c in shown_columns(df) if c in df]].to_html(index=False, na_rep="",
                                                                float_format=lambda x: f"{x:.4g}", classes="results",
                                                                border=0)
    fid = pd.DataFrame(fidelity)
    fid_html = fid[[c for c in FIDELITY_COLUMNS if c in fid]].to_html(index=False, na_rep="", border=0) if fidelity else ""
    quality_html = "" if quality.empty else (
        "<h2>Quality (beside stock fp32)</h2>" + "".join(f"<p>{html.escape(line)}</p>" for line in quality_lines(df))
        + quality.to_html(index=False, na_rep="", float_format=lambda x: f"{x:.4g}", border=0))
    raw = passes_frame(comparisons)
    compared = "".join(f"<li>{html.escape(line)}</li>" for line in comparison_lines(comparisons))
    if compared:
        compared = f"<h2>Comparisons</h2><ul>{compared}</ul>" + (
            raw.to_html(index=False, na_rep="", float_format=lambda x: f"{x:.4g}", border=0) if not raw.empty else "")
    title = f"ChatTTS Lab benchmark{' — sweep ' + str(sweep.get('id')) if sweep else ''}"
    env_items = "".join(f"<li>{html.escape(line)}</li>" for line in environment_lines(env))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse;font-size:13px}}
td,th{{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}} th{{background:#f3f3f3}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(str(sweep.get('status', ''))) if sweep else ''} {html.escape(str(sweep.get('created_at', ''))) if sweep else ''}</p>
<h2>Environment</h2><ul>{env_items}</ul>
<h2>Results</h2>{table}
{''.join(f"<p>{html.escape(line)}</p>" for line in price_lines(df))}
{compared}
{quality_html}
{'<h2>Fidelity (drift from fp32 stock)</h2>' + fid_html if fid_html else ''}
<h2>Figures</h2>
{''.join(f'<div>{f}</div>' for f in figures)}
<details><summary>Environment (raw)</summary><pre>{html.escape(json.dumps(env, indent=1))}</pre></details>
</body></html>"""


def write_reports(df: pd.DataFrame, env: dict, fidelity: list[dict], out_dir: str | Path,
                  formats: Iterable[str] = FORMATS, sweep: dict | None = None,
                  comparisons: dict | None = None) -> dict[str, Path]:
    """Write each chosen format as out_dir/results.<ext>; returns format -> path.

    `comparisons` (chattts_lab.history.compare.sweep_comparison) adds the drift check, every ratio with its
    interval and the raw passes to the markdown, HTML and JSON reports.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for fmt in formats:
        path = out / f"results.{fmt}"
        if fmt == "md":
            path.write_text(markdown_report(df, env, fidelity, sweep, comparisons))
        elif fmt == "csv":
            df.to_csv(path, index=False)
        elif fmt == "json":
            path.write_text(json.dumps(results_json(df, env, fidelity, sweep, comparisons), indent=1, default=str))
        elif fmt == "html":
            path.write_text(html_report(df, env, fidelity, sweep, comparisons))
        else:
            raise ValueError(f"unknown format {fmt!r}: choose from {', '.join(FORMATS)}")
        written[fmt] = path
    return written
