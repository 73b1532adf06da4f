"""Benchmark tab (placeholder until the sweep engine lands on this branch)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from webui.context import AppContext


@dataclass
class BenchmarkTab:
    recommended: gr.State
    apply_best: gr.Button


def build_benchmark_tab(ctx: AppContext) -> BenchmarkTab:
    gr.Markdown("The benchmark dashboard arrives with the sweep engine.")
    recommended = gr.State(None)
    apply_best = gr.Button("Apply the recommendation to the Synthesis tab", elem_id="apply-best")
    return BenchmarkTab(recommended, apply_best)
