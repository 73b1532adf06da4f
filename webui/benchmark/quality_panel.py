"""The Benchmark tab's "Quality beside speed" panel: RTF against a quality figure with the Pareto front, and the
fastest configuration within a quality floor of stock fp32, over the rows the Sweep tab shows (a sweep run here,
or sweeps loaded from the history: several machines' sweeps are drawn as one series per machine)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from chattts_lab.history import plots
from webui.i18n.texts import localized, t, translator
from chattts_lab.history.recommend import MOS_DROP, WER_RISE_PTS, recommend_within_quality

QUALITY_FIGURES = [("predicted MOS", "quality_mos"), ("WER %", "quality_wer_pct"),
                   ("speaker similarity", "quality_speaker_sim")]


def quality_view(df: pd.DataFrame | None, figure: str, mos_drop: float, wer_rise: float, request: gr.Request = None):
    """(the plot, the recommendation's sentence) for the rows shown, in the language of `request`'s browser."""
    df = df if df is not None else pd.DataFrame()
    say = translator(request)
    if df.empty:
        return (plots.empty("RTF vs quality", "", "no sweep shown yet", say),
                localized("Run or load a sweep measured with quality.", request))
    rec = recommend_within_quality(df, float(mos_drop), float(wer_rise))
    return plots.rtf_vs_quality(df, figure or "quality_mos", say), localized(rec.reason, request)


@dataclass(frozen=True)
class QualityPanel:
    figure: gr.Dropdown
    mos_drop: gr.Number
    wer_rise: gr.Number
    show: gr.Button
    plot: gr.Plot
    text: gr.Markdown

    def follow(self, results: gr.State) -> None:
        """Redraw whenever the shown rows change, the floor is edited, or the button is pressed."""
        inputs, outputs = [results, self.figure, self.mos_drop, self.wer_rise], [self.plot, self.text]
        results.change(quality_view, inputs, outputs, api_visibility="private")
        for trigger in (self.show.click, self.figure.change):
            trigger(quality_view, inputs, outputs, api_visibility="private")


def build_quality_panel() -> QualityPanel:
    with gr.Group(elem_id="quality-panel"):
        gr.Markdown(t("### Quality beside speed (sweeps run with `--quality` or the form's quality box)"))
        with gr.Row():
            figure = gr.Dropdown([(t(name), value) for name, value in QUALITY_FIGURES], value="quality_mos", label=t("Quality figure"), elem_id="q-figure")
            mos_drop = gr.Number(MOS_DROP, label=t("Largest MOS drop from stock fp32"), elem_id="q-mos-drop")
            wer_rise = gr.Number(WER_RISE_PTS, label=t("Largest WER rise (points)"), elem_id="q-wer-rise")
            show = gr.Button(t("Fastest within the floor"), elem_id="q-show")
        plot = gr.Plot(label=t("RTF vs quality (Pareto front)"), elem_id="fig-quality")
        text = gr.Markdown(elem_id="q-recommendation")
    return QualityPanel(figure, mos_drop, wer_rise, show, plot, text)
