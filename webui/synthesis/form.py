"""The Synthesis tab's components by name (`SynthesisTab`), its form's values (`Form`) and the request they make
(seeds, voice, sampling). Apart from the builder so that the handlers can import them: Gradio reads a handler's
annotations to find its gr.Request, and every name in them must resolve."""

from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from chattts_lab import InvalidRequest, ModelUnavailable, Refine, Sampling, SynthesisRequest, Voice
from chattts_lab.requests import MAX_BATCH
from chattts_lab.voices import split_sentences
from chattts_lab.serve import speech
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.runtime import RuntimeSettings, max_threads, settings_from

VOICE_MODES = ("Seed / preset", "Speaker string", "Sample audio")
USER_ERRORS = (InvalidRequest, ModelUnavailable, ValueError)
# The controls and the `/synthesize` API start from the library's own defaults.
DEFAULT_SAMPLING, DEFAULT_REFINE, DEFAULT_REQUEST = Sampling(), Refine(), SynthesisRequest(texts=())


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

    def runtime_shown(self) -> set:
        """The inputs of every event that runs the model: the `runtime` state and the controls that show it."""
        return {self.runtime, self.device, self.engine, self.precision, self.threads}

    def settings_shown(self, values: dict) -> RuntimeSettings:
        """What an event runs on: what the runtime controls show. Every event that sets the controls sets the state
        with them, but a pick refused with its reason leaves the control showing it and the state as it was; so the
        state is used only where it matches the controls (it keeps a thread count of None, automatic, which the
        slider shows as max_threads(): the same cached model), else the controls' own settings, as a pick makes
        them. A combination that cannot run here raises ValueError with the reason, never runs something else."""
        shown = values[self.device], values[self.precision], values[self.threads], values[self.engine]
        state = values[self.runtime]
        if state is not None and _shows(state, *shown):
            return state
        return settings_from(*shown)


@dataclass(frozen=True)
class Form:
    """The values of the synthesis controls, read by field name from an event's inputs (see `Form.read`)."""

    text: str
    split: bool
    stream: bool
    voice_mode: str
    voice_seed: float | None
    speaker: str
    sample_audio: str | None
    sample_text: str
    temperature: float
    top_p: float
    top_k: int
    audio_seed: str | None  # seed boxes are text: blank means random
    text_seed: str | None
    refine: bool
    oral: int
    laugh: int
    brk: int
    speed: int
    max_new_token: int
    min_new_token: int

    @staticmethod
    def read(ui: SynthesisTab, values: dict) -> "Form":
        """The form from an event whose inputs were a set of components (Gradio passes a dict keyed by
        component): each field comes from the component of the same name in `ui`."""
        return Form(**{f.name: values[getattr(ui, f.name)] for f in fields(Form)})


def _shows(state: RuntimeSettings, device: str, precision: str, threads, engine: str) -> bool:
    """Whether the runtime controls show `state` (its automatic thread count is the slider's max_threads())."""
    automatic = max_threads()
    return ((state.device, state.precision, state.engine) == (device, precision, engine)
            and (state.threads or automatic) == (int(threads) if threads else automatic))


def _seed(value) -> int | None:
    """A seed as typed: blank is random (a new draw every time), otherwise a whole number of 0 or more.
    The boxes are text, not gr.Number: a Number shows and sends 0 for "no value", so blank could never mean random."""
    if isinstance(value, (int, float)):
        return int(value)
    text = (value or "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise InvalidRequest(f"a seed is a whole number of 0 or more, or blank for random; got {text!r}")
    return int(text)


def _seed_text(seed: int | None) -> str:
    return "" if seed is None else str(seed)


def _voice(ctx: AppContext, settings: RuntimeSettings, form: Form, imported_code: str | None) -> Voice:
    if form.voice_mode == "Speaker string":
        return Voice(speaker=(form.speaker or "").strip())
    if form.voice_mode == "Sample audio":
        if form.sample_audio:
            code = speech.sample_audio_code(ctx, settings, form.sample_audio)
        elif imported_code:
            code = imported_code
        else:
            raise InvalidRequest("upload a sample clip (and type its transcript) to use a sample-audio voice")
        return Voice(sample_audio_code=code, sample_text=form.sample_text)
    return Voice(seed=_seed(form.voice_seed))


def build_request(ctx: AppContext, settings: RuntimeSettings, form: Form, imported_code: str | None = None) -> SynthesisRequest:
    return build_requests(ctx, settings, form, imported_code)[0]


def build_requests(ctx: AppContext, settings: RuntimeSettings, form: Form,
                   imported_code: str | None = None) -> list[SynthesisRequest]:
    """The form's request; split into sentences, as many batches of at most MAX_BATCH as the text needs, in order."""
    texts = (split_sentences(form.text) if form.split else [form.text]) or [""]
    voice = _voice(ctx, settings, form, imported_code)
    sampling = Sampling(float(form.temperature), float(form.top_p), int(form.top_k), _seed(form.audio_seed),
                        _seed(form.text_seed))
    return [SynthesisRequest.of(
        texts[at:at + MAX_BATCH], voice=voice, sampling=sampling,
        refine=Refine(bool(form.refine), int(form.oral), int(form.laugh), int(form.brk)),
        speed=int(form.speed),
        max_new_token=int(form.max_new_token),
        min_new_token=min(int(form.min_new_token or 0), int(form.max_new_token)),
    ) for at in range(0, len(texts), MAX_BATCH)]
