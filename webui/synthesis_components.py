"""Every component of the Synthesis tab by name (`SynthesisTab`), apart from the builder so that the handlers can
import it: Gradio reads a handler's annotations to find its gr.Request, and every name in them must resolve."""

from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from webui.synthesis_form import Form


@dataclass(frozen=True, eq=False)
class SynthesisTab:
    """Every component of the tab, by name: handlers read event inputs and write outputs through these
    fields, so adding a control never shifts another one. The `Form` fields are here under the same names."""

    runtime: gr.State
    # whether a person (or the app's command line) chose `runtime`: a refresh after a sweep then keeps it. Server-side
    # state like `runtime`, so an event reads both as they are when it runs, never one of them as it was when it was sent
    chosen: gr.State
    imported_code: gr.State
    # the form (see Form)
    text: gr.Textbox
    split: gr.Checkbox
    stream: gr.Checkbox
    voice_mode: gr.Radio
    voice_seed: gr.Number
    speaker: gr.Textbox
    sample_audio: gr.Audio
    sample_text: gr.Textbox
    temperature: gr.Slider
    top_p: gr.Slider
    top_k: gr.Slider
    audio_seed: gr.Textbox
    text_seed: gr.Textbox
    refine: gr.Checkbox
    oral: gr.Slider
    laugh: gr.Slider
    brk: gr.Slider
    speed: gr.Slider
    max_new_token: gr.Slider
    min_new_token: gr.Slider
    # voice helpers and cards
    preset: gr.Dropdown
    saved_voice: gr.Dropdown  # the voice library's cards
    dice: gr.Button
    show_speaker: gr.Button
    card_name: gr.Textbox
    export_card: gr.Button
    save_card: gr.Button
    card_out: gr.File
    card_in: gr.File
    # runtime
    device: gr.Dropdown
    engine: gr.Dropdown
    precision: gr.Dropdown
    threads: gr.Slider
    apply_best: gr.Button
    in_use: gr.Markdown  # which configuration requests run on, and why
    use_fastest: gr.Button  # one click to the fastest configuration when a safer one is in use
    fastest: gr.State  # the RuntimeSettings use_fastest applies (what runtime.serving_choice says now)
    # results
    generate: gr.Button
    interrupt: gr.Button
    banner: gr.HTML
    stream_audio: gr.Audio  # plays a stream as it comes (with ffmpeg)
    audio: gr.Audio  # a result made whole; autoplays
    streamed: gr.Audio  # a streamed result, whole, once its stream ends; never autoplays
    metrics: gr.Markdown
    measurements: gr.JSON

    def form(self) -> set:
        return {getattr(self, f.name) for f in fields(Form)}

    def results(self) -> set:
        return {*self.players(), self.measurements, self.metrics, self.banner}

    def players(self) -> set:
        return {self.stream_audio, self.audio, self.streamed}

    def runtime_controls(self) -> set:
        return {self.device, self.engine, self.precision, self.threads, self.runtime, self.chosen, self.in_use}



