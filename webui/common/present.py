"""Turning library results into what a person reads: the metrics line, stage table and banners."""

from __future__ import annotations

import functools
import html

import gradio as gr

from chattts_lab import SYNTHETIC_WARNING
from webui.i18n.texts import localized, wants_chinese

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


# The metrics line's words in Chinese (the English ones are the keys; numbers and units stay as they are).
METRICS_ZH = {
    "Latency": "延迟", "×real-time": "实时倍数", "GPT steps/s": "GPT 步/秒", "peak RSS": "峰值 RSS",
    "peak GPU": "峰值 GPU", "time to first audio": "首段音频时间", "interrupted": "已中断",
    "audio {0:.2f} s from {1} tokens": "由 {1} 个 token 生成音频 {0:.2f} s",
    "ran on {0}, GPT {1}, {2} threads, {3} engine": "运行于 {0}，GPT {1}，{2} 个线程，{3} 引擎",
    "waited {0:.2f} s for the model": "等待模型 {0:.2f} s",
    "shared its batch with {0} other request(s)": "与 {0} 个其他请求共用一批",
    "| stage | seconds | share |": "| 阶段 | 秒 | 占比 |",
    "refine text": "润色文本", "GPT prefill": "GPT 预填充", "GPT decode": "GPT 解码", "decoder (DVAE)": "解码器（DVAE）",
    "vocoder (Vocos)": "声码器（Vocos）", "other (normalise, tokenise, glue)": "其他（规范化、分词、拼接）",
}


def metrics_markdown(m: dict, request=None) -> str:
    """One summary line and a stage breakdown table for a measurements dict (SynthesisOutput.measurements.as_dict()),
    in the language of `request`'s browser."""
    if not m:
        return ""
    w = (lambda en: METRICS_ZH.get(en, en)) if wants_chinese(request) else (lambda en: en)
    eff = m.get("effective", {})
    lines = [
        f"**{w('Latency')}** {_fmt(m.get('wall_s'), '.2f', ' s')} · **RTF** {_fmt(m.get('rtf'), '.2f')} · "
        f"**{w('×real-time')}** {_fmt(m.get('x_realtime'), '.2f')} · "
        f"**{w('GPT steps/s')}** {_fmt(m.get('gpt_steps_per_s'), '.1f')} · "
        f"**{w('peak RSS')}** {_fmt(m.get('peak_rss_mb'), ',.0f', ' MB')}"
        + (f" · **{w('peak GPU')}** {m['peak_device_mb']:,.0f} MB" if m.get("peak_device_mb") else "")
        + (f" · **{w('time to first audio')}** {m['ttfa_s']:.2f} s" if m.get("ttfa_s") is not None else "")
        + (f" · **{w('interrupted')}**" if m.get("interrupted") else "")
        + (f" ({m['interrupted_reason']})" if m.get("interrupted") and m.get("interrupted_reason") else ""),
        "",
        w("audio {0:.2f} s from {1} tokens").format(sum(m.get('audio_s') or [0]), sum(m.get('tokens') or [0]))
        + " · " + w("ran on {0}, GPT {1}, {2} threads, {3} engine").format(
            eff.get('device', '?'), eff.get('dtype_gpt', '?'), eff.get('threads', '?'), eff.get('engine', '?'))
        + (" · " + w("waited {0:.2f} s for the model").format(m['queue_wait_s']) if m.get("queue_wait_s") else "")
        + (" · " + w("shared its batch with {0} other request(s)").format(m['batch_requests'] - 1)
           if m.get("batch_requests", 1) > 1 else ""),
        "",
        w("| stage | seconds | share |"),
        "|---|---:|---:|",
    ]
    wall = m.get("wall_s") or 0
    for key, label in STAGE_LABELS.items():
        secs = (m.get("stages") or {}).get(key, 0.0)
        share = 100 * secs / wall if wall else 0
        lines.append(f"| {w(label)} | {secs:.3f} | {share:.0f} % |")
    return "\n".join(lines)


def rounded(df, digits: int = 4):
    """A table's float columns to `digits` significant digits: what a person reads, not 17 of them."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].map(lambda v: float(f"{v:.{digits}g}") if v == v else v)  # v != v: NaN stays NaN
    return out


def warn(message: str, request=None) -> None:
    """Tell a person what went wrong and what to do, in a toast that closes by itself, in the language of `request`'s
    browser (the toast's header, "Warning", is Gradio's own: its page draws the type, whatever the title). A handler
    that warns and returns (instead of raising gr.Error) leaves its outputs as they were: an error covers each with a
    badge."""
    gr.Warning(localized(message, request), duration=WARNING_S)


def info(message: str, request=None) -> None:
    """A toast that says what happened, in the language of `request`'s browser."""
    gr.Info(localized(message, request))


def error(message: str, request=None, duration: float | None = WARNING_S) -> gr.Error:
    """The error a handler raises, in the language of `request`'s browser."""
    return gr.Error(localized(message, request), duration=duration)


def warns(handler):
    """`handler` with its mistakes (a gr.Error it raises) told in a warning that closes by itself, and every output
    left as it was: a raised error covers each output with a red "Error" badge, and its toast stays open."""
    @functools.wraps(handler)
    def warned(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except gr.Error as exc:  # in the language of the browser, when the handler takes its request
            request = next((a for a in [*args, *kwargs.values()] if isinstance(a, gr.Request)), None)
            warn(exc.message, request)
            return gr.skip()  # one skip for every output
    return warned


def banner_html(synthetic: bool, note: str = "", request=None) -> str:
    """The warning shown wherever audio plays when the weights are random (in the language of `request`'s browser)."""
    if not synthetic:
        return ""
    extra = f"<br><small>{html.escape(localized(note, request))}</small>" if note else ""
    warning = localized(SYNTHETIC_WARNING, request)
    return f'<div class="synthetic-banner" role="alert">⚠️ {html.escape(warning)}{extra}</div>'


CSS = """
.synthetic-banner { background: #fff4d6; border: 1px solid #e0b100; color: #5c4500; padding: 8px 12px;
  border-radius: 8px; font-weight: 600; }
.dark .synthetic-banner { background: #4a3b00; color: #ffe9a3; }
"""
