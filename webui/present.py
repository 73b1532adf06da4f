"""Turning library results into what a person reads: the metrics line, stage table and banners."""

from __future__ import annotations

import functools
import html

import gradio as gr

from chattts_lab import SYNTHETIC_WARNING

WARNING_S = 12  # a mistake's toast closes by itself: toasts that stay pile up ("Error (5)")

STAGE_LABELS = {
    "refine_s": "refine text",
    "prefill_s": "GPT prefill",
    "decode_s": "GPT decode",
    "decoder_s": "decoder (DVAE)",
    "vocoder_s": "vocoder (Vocos)",
    "other_s": "other (normalise, tokenise, glue)",
}


def _fmt(value, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def metrics_markdown(m: dict) -> str:
    """One summary line and a stage breakdown table for a measurements dict (SynthesisOutput.measurements.as_dict())."""
    if not m:
        return ""
    eff = m.get("effective", {})
    lines = [
        f"**Latency** {_fmt(m.get('wall_s'), '.2f', ' s')} · **RTF** {_fmt(m.get('rtf'), '.2f')} · "
        f"**×real-time** {_fmt(m.get('x_realtime'), '.2f')} · **GPT steps/s** {_fmt(m.get('gpt_steps_per_s'), '.1f')} · "
        f"**peak RSS** {_fmt(m.get('peak_rss_mb'), ',.0f', ' MB')}"
        + (f" · **peak GPU** {m['peak_device_mb']:,.0f} MB" if m.get("peak_device_mb") else "")
        + (f" · **time to first audio** {m['ttfa_s']:.2f} s" if m.get("ttfa_s") is not None else "")
        + (" · **interrupted**" if m.get("interrupted") else "")
        + (f" ({m['interrupted_reason']})" if m.get("interrupted") and m.get("interrupted_reason") else ""),
        "",
        f"audio {sum(m.get('audio_s') or [0]):.2f} s from {sum(m.get('tokens') or [0])} tokens · "
        f"ran on {eff.get('device', '?')}, GPT {eff.get('dtype_gpt', '?')}, {eff.get('threads', '?')} threads, "
        f"{eff.get('engine', '?')} engine"
        + (f" · waited {m['queue_wait_s']:.2f} s for the model" if m.get("queue_wait_s") else "")
        + (f" · shared its batch with {m['batch_requests'] - 1} other request(s)" if m.get("batch_requests", 1) > 1 else ""),
        "",
        "| stage | seconds | share |",
        "|---|---:|---:|",
    ]
    wall = m.get("wall_s") or 0
    for key, label in STAGE_LABELS.items():
        secs = (m.get("stages") or {}).get(key, 0.0)
        share = 100 * secs / wall if wall else 0
        lines.append(f"| {label} | {secs:.3f} | {share:.0f} % |")
    return "\n".join(lines)


def rounded(df, digits: int = 4):
    """A table's float columns to `digits` significant digits: what a person reads, not 17 of them."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].map(lambda v: float(f"{v:.{digits}g}") if v == v else v)  # v != v: NaN stays NaN
    return out


def warn(message: str) -> None:
    """Tell a person what went wrong and what to do, in a toast that closes by itself. A handler that warns and
    returns (instead of raising gr.Error) leaves its outputs as they were: an error covers each with a badge."""
    gr.Warning(message, duration=WARNING_S)


def warns(handler):
    """`handler` with its mistakes (a gr.Error it raises) told in a warning that closes by itself, and every output
    left as it was: a raised error covers each output with a red "Error" badge, and its toast stays open."""
    @functools.wraps(handler)
    def warned(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except gr.Error as exc:
            warn(exc.message)
            return gr.skip()  # one skip for every output
    return warned


def banner_html(synthetic: bool, note: str = "") -> str:
    """The warning shown wherever audio plays when the weights are random."""
    if not synthetic:
        return ""
    extra = f"<br><small>{html.escape(note)}</small>" if note else ""
    return f'<div class="synthetic-banner" role="alert">⚠️ {html.escape(SYNTHETIC_WARNING)}{extra}</div>'


CSS = """
.synthetic-banner { background: #fff4d6; border: 1px solid #e0b100; color: #5c4500; padding: 8px 12px;
  border-radius: 8px; font-weight: 600; }
.dark .synthetic-banner { background: #4a3b00; color: #ffe9a3; }
"""
