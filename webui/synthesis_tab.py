"""Synthesis tab: try voices in a browser. Plain handlers first, then the builder, then the wiring."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import gradio as gr

from chattts_lab import InvalidRequest, ModelUnavailable, Refine, Sampling, SynthesisOutput, SynthesisRequest, Voice
from chattts_lab import audio as audio_io
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.requests import MAX_NEW_TOKEN
from chattts_lab.synthesis import SAMPLE_RATE, StreamChunk
from chattts_lab.voices import PRESET_VOICES, VoiceCard, parse_card, resolve_voice, save_card, split_sentences
from webui import present, speech
from webui.context import MODEL_QUEUE, SYNTHESIS_QUEUE, AppContext, bind
from webui.runtime import (RuntimeSettings, ServingChoice, default_settings, describe, devices, engines_for, max_threads,
                           precisions_for, settings_from)

VOICE_MODES = ("Seed / preset", "Speaker string", "Sample audio")
EXAMPLES = [
    ["四川美食确实以辣闻名，但也有不辣的选择。比如甜水面、赖汤圆、蛋烘糕、叶儿粑等，这些小吃口味温和，甜而不腻，也很受欢迎。"],
    ["Hello! This is ChatTTS Lab. It measures how fast text to speech runs on the machine in front of you."],
    ["我最近在学 English，每天 practice 半个小时 [uv_break] 感觉进步还挺明显的。"],
    ["That joke was so bad [laugh] that I had to hear it twice [uv_break] and it got worse."],
]
USER_ERRORS = (InvalidRequest, ModelUnavailable, ValueError)
# The controls and the `/synthesize` API start from the library's own defaults.
DEFAULT_SAMPLING, DEFAULT_REFINE, DEFAULT_REQUEST = Sampling(), Refine(), SynthesisRequest(texts=())


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
    def read(ui: "SynthesisTab", values: dict) -> "Form":
        """The form from an event whose inputs were a set of components (Gradio passes a dict keyed by
        component): each field comes from the component of the same name in `ui`."""
        return Form(**{f.name: values[getattr(ui, f.name)] for f in fields(Form)})


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
    texts = split_sentences(form.text) if form.split else [form.text]
    return SynthesisRequest.of(
        texts or [""],
        voice=_voice(ctx, settings, form, imported_code),
        sampling=Sampling(float(form.temperature), float(form.top_p), int(form.top_k), _seed(form.audio_seed), _seed(form.text_seed)),
        refine=Refine(bool(form.refine), int(form.oral), int(form.laugh), int(form.brk)),
        speed=int(form.speed),
        max_new_token=int(form.max_new_token),
        min_new_token=min(int(form.min_new_token or 0), int(form.max_new_token)),
    )


def _result(ctx: AppContext, out: SynthesisOutput, model, extra: dict | None = None):
    path = audio_io.write_wav(audio_io.join(out.audio, out.sample_rate), ctx.audio_dir)
    m = out.measurements.as_dict()
    m.update(extra or {})
    m["synthetic"] = out.synthetic
    m["model"] = model.source.label
    return str(path), m


async def generate(ctx: AppContext, ui: SynthesisTab, values: dict, request: gr.Request, progress=gr.Progress()):
    """Generate button: yields updates of the player, the stream, the measurements and the banner."""
    form, settings = Form.read(ui, values), values[ui.runtime]
    session = request.session_hash if request else None
    try:
        # In a thread: a sample-audio voice is encoded by the model, which may be busy with a sweep.
        req = await asyncio.to_thread(build_request, ctx, settings, form, values[ui.imported_code])
        progress(0.1, desc=speech.waiting_note(ctx, settings))
        if not form.stream:
            out, model = await speech.serve(ctx, settings, req, session)
            path, m = _result(ctx, out, model)
            banner = present.banner_html(out.synthetic, model.source.note)
            yield {ui.audio: gr.update(value=path, autoplay=True), ui.measurements: m,
                   ui.metrics: present.metrics_markdown(m), ui.banner: banner}
            return
        async for update in _generate_stream(ctx, ui, settings, req, session, live_playback()):
            yield update
    except USER_ERRORS as exc:
        raise gr.Error(str(exc), duration=None) from exc


def live_playback() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the stream is measured and played at the end."""
    return shutil.which("ffmpeg") is not None


async def _generate_stream(ctx: AppContext, ui: SynthesisTab, settings: RuntimeSettings, req: SynthesisRequest,
                           session, live: bool):
    # Sentences stream one after another, so playback follows the text's order. Time to first audio is
    # what the person waited: the queue included.
    parts, measurements, ttfa, started = [], [], None, time.perf_counter()
    for text in req.texts:
        async for item in speech.serve_stream(ctx, settings, replace(req, texts=(text,)), session):
            if isinstance(item, StreamChunk):
                banner = present.banner_html(item.synthetic)
                if ttfa is None:
                    ttfa = time.perf_counter() - started
                    note = "" if live else " (install ffmpeg for live playback; the audio plays when done)"
                    yield {ui.metrics: f"**time to first audio** {ttfa:.2f} s · streaming…{note}", ui.banner: banner}
                if live:
                    yield {ui.stream_audio: (SAMPLE_RATE, item.audio[0]), ui.banner: banner}
            else:
                out, model = item
                parts.append(out)
                measurements.append(out.measurements.as_dict())
        if parts and parts[-1].measurements.interrupted:
            break
    joined = replace(parts[0], audio=[audio_io.join([a for p in parts for a in p.audio])])
    extra = {"parts": measurements} if len(measurements) > 1 else {}
    path, m = _result(ctx, joined, model, extra)
    yield {ui.audio: gr.update(value=path, autoplay=not live), ui.measurements: m,
           ui.metrics: present.metrics_markdown(m), ui.banner: present.banner_html(model.synthetic, model.source.note)}


def interrupt(request: gr.Request = None):
    if not speech.RUNNING.interrupt(request.session_hash if request else None):
        gr.Info("Nothing of yours is running.")
    else:
        gr.Info("Interrupting after the current step; you keep the audio made so far.")


def roll_dice(ui: SynthesisTab):
    return {ui.voice_seed: random.randint(1, 99_999), ui.voice_mode: VOICE_MODES[0], ui.preset: None}


def pick_preset(ui: SynthesisTab, name):
    if not name:
        return gr.skip()
    return {ui.voice_seed: PRESET_VOICES[name], ui.voice_mode: VOICE_MODES[0]}


def show_speaker(ctx: AppContext, ui: SynthesisTab, values: dict):
    seed = values[ui.voice_seed]
    if seed is None:
        raise gr.Error("set a voice seed first")
    return {ui.speaker: speech.speaker_for_seed(ctx, values[ui.runtime], int(seed)), ui.voice_mode: VOICE_MODES[1]}


def _card_from_form(ctx: AppContext, ui: SynthesisTab, values: dict) -> VoiceCard:
    """The voice card for the controls' values as this event sent them."""
    settings, imported_code, form = values[ui.runtime], values[ui.imported_code], Form.read(ui, values)
    voice = _voice(ctx, settings, form, imported_code)
    req = build_request(ctx, settings, replace(form, text="card", split=False), imported_code)
    card = VoiceCard(
        name=(values[ui.card_name] or "voice").strip()[:64] or "voice",
        speaker=voice.speaker,
        seed=voice.seed,
        sample_audio_code=voice.sample_audio_code,
        sample_text=voice.sample_text,
        sampling=req.sampling,
        refine=req.refine,
        speed=req.speed,
    )
    return speech.card_with_embedding(ctx, settings, card)


def export_card(ctx: AppContext, ui: SynthesisTab, values: dict):
    """Export button: the voice as a small JSON file that reproduces it on another machine."""
    try:
        card = _card_from_form(ctx, ui, values)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    folder = ctx.files_dir / f"card-{random.randint(0, 16**8):08x}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(card.name).name or 'voice'}.voice.json"
    path.write_text(card.to_json(), encoding="utf-8")
    return {ui.card_out: str(path), ui.speaker: card.speaker or gr.skip()}


def save_to_library(ctx: AppContext, ui: SynthesisTab, values: dict):
    try:
        card = _card_from_form(ctx, ui, values)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    save_card(card, ctx.voices_dir)
    gr.Info(f"Saved voice '{card.name}': the OpenAI-compatible endpoint now accepts voice='{card.name}'.")


def import_card(ui: SynthesisTab, file):
    """Import: fill the voice and sampling controls from a card (parsed strictly as data)."""
    if not file:
        return gr.skip()
    try:
        card = parse_card(Path(file).read_bytes()[: 2 * 1024 * 1024])
    except USER_ERRORS as exc:
        # A warning, not an error: an error would cover every voice control with an error overlay.
        gr.Warning(f"Could not import that voice card: {exc}", duration=None)
        return {ui.card_in: None}
    mode = VOICE_MODES[1] if card.speaker else VOICE_MODES[2] if card.sample_audio_code else VOICE_MODES[0]
    s, r = card.sampling, card.refine
    gr.Info(f"Imported voice '{card.name}'.")
    return {
        ui.voice_mode: mode, ui.voice_seed: card.seed, ui.speaker: card.speaker or "",
        ui.sample_text: card.sample_text or "", ui.imported_code: card.sample_audio_code,
        ui.temperature: s.temperature, ui.top_p: s.top_p, ui.top_k: s.top_k,
        ui.audio_seed: _seed_text(s.audio_seed), ui.text_seed: _seed_text(s.text_seed),
        ui.refine: r.enabled, ui.oral: r.oral, ui.laugh: r.laugh, ui.brk: r.break_,
        ui.speed: card.speed, ui.card_name: card.name, ui.card_in: None,
    }


def change_device(ui: SynthesisTab, device):
    return {ui.engine: gr.update(choices=engines_for(device), value="stock"),
            ui.precision: gr.update(choices=precisions_for(device, "stock"), value="fp32")}


def change_engine(device, engine):
    return gr.update(choices=precisions_for(device, engine), value="fp32")


def update_settings(ui: SynthesisTab, values: dict):
    try:
        settings = settings_from(values[ui.device], values[ui.precision], values[ui.threads], values[ui.engine])
    except ValueError as exc:
        raise gr.Error(str(exc)) from None
    return {ui.runtime: settings, ui.in_use: in_use_note(settings, "chosen on this page")}


def in_use_note(settings: RuntimeSettings, why: str) -> str:
    return f"**In use:** {describe(settings)} ({why})."


def apply_settings(ui: SynthesisTab, settings: RuntimeSettings | dict | None):
    """Put recommended settings into the runtime controls (and the per-user state)."""
    if not settings:
        raise gr.Error("No recommendation yet: run a sweep in the Benchmark tab first.")
    try:
        s = settings if isinstance(settings, RuntimeSettings) else settings_from(**settings)
    except ValueError as exc:
        raise gr.Error(str(exc)) from None
    gr.Info(f"Applied {s.device} · {s.precision} · {s.threads} threads · {s.engine} engine.")
    return {ui.device: gr.update(value=s.device), ui.engine: gr.update(choices=engines_for(s.device), value=s.engine),
            ui.precision: gr.update(choices=precisions_for(s.device, s.engine), value=s.precision),
            ui.threads: s.threads, ui.runtime: s}


async def api_synthesize(ctx: AppContext, text: str, voice: str = "", temperature: float = DEFAULT_SAMPLING.temperature,
                         top_p: float = DEFAULT_SAMPLING.top_p, top_k: int = DEFAULT_SAMPLING.top_k,
                         audio_seed: int | None = None, speed: int = DEFAULT_REQUEST.speed,
                         max_new_token: int = DEFAULT_REQUEST.max_new_token, split: bool = False):
    """The `/synthesize` API: text and a voice (preset name, seed:N, speaker string or voice card JSON)
    -> (audio file path, measurements dict). Only `text` is required; the order is the documented one."""
    try:
        card = resolve_voice(voice, ctx.voices_dir) if (voice or "").strip() else VoiceCard(name="default")
        texts = split_sentences(text) if split else [text]
        req = SynthesisRequest.of(
            texts or [""], voice=card.voice,
            sampling=Sampling(float(temperature), float(top_p), int(top_k), _seed(audio_seed)),
            speed=int(speed), max_new_token=int(max_new_token),
        )
        out, model = await speech.serve(ctx, speech.serving_settings(ctx), req)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    return _result(ctx, out, model)


# ----------------------------------------------------------------------------------------------
# Builder


@dataclass(frozen=True, eq=False)
class SynthesisTab:
    """Every component of the tab, by name: handlers read event inputs and write outputs through these
    fields, so adding a control never shifts another one. The `Form` fields are here under the same names."""

    runtime: gr.State
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
    # results
    generate: gr.Button
    interrupt: gr.Button
    banner: gr.HTML
    stream_audio: gr.Audio
    audio: gr.Audio
    metrics: gr.Markdown
    measurements: gr.JSON

    def form(self) -> set:
        return {getattr(self, f.name) for f in fields(Form)}

    def results(self) -> set:
        return {self.stream_audio, self.audio, self.measurements, self.metrics, self.banner}

    def runtime_controls(self) -> set:
        return {self.device, self.engine, self.precision, self.threads, self.runtime}


def build_synthesis_tab(ctx: AppContext) -> SynthesisTab:
    ui = _build_layout(ctx.serving or ServingChoice(default_settings(), "the defaults"))
    _wire(ctx, ui)
    _build_api(ctx)
    return ui


def _build_layout(serving: ServingChoice) -> SynthesisTab:
    start = serving.settings
    runtime = gr.State(start)
    imported_code = gr.State(None)
    with gr.Row():
        with gr.Column(scale=3):
            text = gr.Textbox(label="Text", lines=4, value=EXAMPLES[1][0], elem_id="text",
                              info="Inline control tokens work: [uv_break] [laugh] [lbreak]")
            gr.Examples(EXAMPLES, inputs=[text], label="Examples")
            with gr.Row():
                generate_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                interrupt_btn = gr.Button("Interrupt", variant="stop", elem_id="interrupt")
            with gr.Row():
                stream = gr.Checkbox(label="Stream (play while generating)", value=False, elem_id="stream")
                split = gr.Checkbox(label="Split long text into sentences (batched)", value=False, elem_id="split")
            with gr.Accordion("Voice", open=True):
                voice_mode = gr.Radio(list(VOICE_MODES), value=VOICE_MODES[0], label="Voice from", elem_id="voice-mode")
                with gr.Row():
                    preset = gr.Dropdown(list(PRESET_VOICES), value=None, label="Preset voice", elem_id="preset")
                    voice_seed = gr.Number(value=2, precision=0, label="Voice seed", elem_id="voice-seed", minimum=0)
                    dice = gr.Button("Random voice", elem_id="dice", scale=0, min_width=120)
                speaker = gr.Textbox(label="Speaker embedding (copy / paste)", lines=2, max_lines=4, elem_id="speaker",
                                     buttons=["copy"], placeholder="paste a speaker string to reuse a voice")
                show_spk = gr.Button("Show the speaker string for this seed", size="sm")
                with gr.Row():
                    sample_audio = gr.Audio(label="Sample clip (voice from a recording)", sources=["upload"],
                                            type="filepath", elem_id="sample-audio")
                    sample_text = gr.Textbox(label="Transcript of the clip", lines=3, elem_id="sample-text")
            # Open from the start: Gradio 6 mounts a closed accordion's controls on first opening and then
            # resets them to their initial values, dropping whatever was typed in the meantime (a card name).
            with gr.Accordion("Voice card: export / import", open=True, elem_id="card-accordion"):
                gr.Markdown("A small JSON with the speaker embedding, seeds and parameters: the voice reproduces "
                            "on another machine. Saved cards are also voices for the OpenAI-compatible endpoint.")
                with gr.Row():
                    card_name = gr.Textbox(label="Voice name", value="my-voice", elem_id="card-name")
                    export_btn = gr.Button("Export voice card", elem_id="export-card")
                    save_btn = gr.Button("Save to voice library", elem_id="save-card")
                with gr.Row():
                    card_out = gr.File(label="Voice card (download)", elem_id="card-out", height=120)
                    card_in = gr.File(label="Import a voice card", file_types=[".json"], elem_id="card-in", height=120)
            with gr.Accordion("Sampling", open=True):  # open from the start, for the same reason
                with gr.Row():
                    temperature = gr.Slider(0.01, 1.0, value=DEFAULT_SAMPLING.temperature, step=0.01, label="Temperature",
                                            elem_id="temperature")
                    top_p = gr.Slider(0.1, 1.0, value=DEFAULT_SAMPLING.top_p, step=0.05, label="Top-P")
                    top_k = gr.Slider(1, 50, value=DEFAULT_SAMPLING.top_k, step=1, label="Top-K")
                with gr.Row():
                    audio_seed = gr.Textbox("", label="Sampling seed", placeholder="blank: random", max_lines=1,
                                            elem_id="audio-seed")
                    text_seed = gr.Textbox("", label="Text seed (refine)", placeholder="blank: random", max_lines=1,
                                           elem_id="text-seed")
                    speed = gr.Slider(0, 9, value=DEFAULT_REQUEST.speed, step=1, label="Speed")
                with gr.Row():
                    refine = gr.Checkbox(label="Refine text first", value=DEFAULT_REFINE.enabled)
                    oral = gr.Slider(0, 9, value=DEFAULT_REFINE.oral, step=1, label="Oral")
                    laugh = gr.Slider(0, 2, value=DEFAULT_REFINE.laugh, step=1, label="Laugh")
                    brk = gr.Slider(0, 7, value=DEFAULT_REFINE.break_, step=1, label="Break")
                with gr.Row():
                    max_new_token = gr.Slider(1, MAX_NEW_TOKEN, value=DEFAULT_REQUEST.max_new_token, step=1,
                                              label=f"Max audio tokens ({STEPS_PER_AUDIO_SECOND:.1f} per second)", elem_id="max-new-token")
                    min_new_token = gr.Slider(0, MAX_NEW_TOKEN, value=0, step=1, label="Min audio tokens",
                                              elem_id="min-new-token")
            # Open: controls in a closed accordion are built on first opening and reset to these values then.
            with gr.Accordion("Runtime", open=True):
                in_use = gr.Markdown(in_use_note(start, serving.reason), elem_id="in-use")
                with gr.Row():
                    device = gr.Dropdown(devices(), value=start.device, label="Device", elem_id="device")
                    engine = gr.Dropdown(engines_for(start.device), value=start.engine, label="Engine", elem_id="engine")
                    precision = gr.Dropdown(precisions_for(start.device, start.engine), value=start.precision,
                                            label="Precision", elem_id="precision")
                    threads = gr.Slider(1, max_threads(), value=start.threads or max_threads(), step=1, label="Threads",
                                        elem_id="threads")
                with gr.Row():
                    apply_best = gr.Button("Apply the best configuration from the benchmark", elem_id="apply-best-synth")
                    fastest = serving.fastest
                    use_fastest = gr.Button(f"Use the fastest: {describe(fastest)}" if fastest else "Use the fastest",
                                            visible=fastest is not None, elem_id="use-fastest")
        with gr.Column(scale=2):
            banner = gr.HTML(elem_id="banner")
            stream_audio = gr.Audio(label="Stream", streaming=True, autoplay=True, visible=False, elem_id="stream-audio")
            audio = gr.Audio(label="Audio", type="filepath", autoplay=True, buttons=["download"], elem_id="audio",
                             interactive=False)
            metrics = gr.Markdown(elem_id="metrics")
            with gr.Accordion("Raw measurements (JSON)", open=False):
                measurements = gr.JSON(label="Measurements", elem_id="measurements")
    return SynthesisTab(
        runtime=runtime, imported_code=imported_code,
        text=text, split=split, stream=stream, voice_mode=voice_mode, voice_seed=voice_seed, speaker=speaker,
        sample_audio=sample_audio, sample_text=sample_text, temperature=temperature, top_p=top_p, top_k=top_k,
        audio_seed=audio_seed, text_seed=text_seed, refine=refine, oral=oral, laugh=laugh, brk=brk, speed=speed,
        max_new_token=max_new_token, min_new_token=min_new_token,
        preset=preset, dice=dice, show_speaker=show_spk, card_name=card_name, export_card=export_btn,
        save_card=save_btn, card_out=card_out, card_in=card_in,
        device=device, engine=engine, precision=precision, threads=threads, apply_best=apply_best,
        in_use=in_use, use_fastest=use_fastest,
        generate=generate_btn, interrupt=interrupt_btn, banner=banner, stream_audio=stream_audio, audio=audio,
        metrics=metrics, measurements=measurements,
    )


def _wire(ctx: AppContext, ui: SynthesisTab) -> None:
    """Every event of the tab. Inputs given as a set arrive as one dict keyed by component; outputs are
    returned as a dict keyed by component, so neither depends on a position."""
    private = dict(api_visibility="private")
    model_work = dict(concurrency_id=MODEL_QUEUE, **private)
    synthesis_work = dict(concurrency_id=SYNTHESIS_QUEUE, concurrency_limit=synthesis_concurrency(ctx), **private)
    synthesis_inputs = {ui.runtime, ui.imported_code} | ui.form()
    for trigger in (ui.generate.click, ui.text.submit):
        trigger(bind(generate, ctx, ui), synthesis_inputs, ui.results(), **synthesis_work)
    # Queued (in a group of its own, so it never waits for the model): Gradio shows a handler's gr.Info toasts
    # only for queued events, and the toast is how a person learns whether anything was interrupted.
    ui.interrupt.click(interrupt, None, None, concurrency_limit=None, **private)
    ui.stream.change(lambda s: gr.update(visible=s), ui.stream, ui.stream_audio, queue=False, **private)
    ui.dice.click(bind(roll_dice, ui), None, {ui.voice_seed, ui.voice_mode, ui.preset}, queue=False, **private)
    ui.preset.change(bind(pick_preset, ui), ui.preset, {ui.voice_seed, ui.voice_mode}, queue=False, **private)
    ui.show_speaker.click(bind(show_speaker, ctx, ui), {ui.runtime, ui.voice_seed}, {ui.speaker, ui.voice_mode},
                          **model_work)
    ui.sample_audio.upload(lambda: {ui.voice_mode: VOICE_MODES[2], ui.imported_code: None}, None,
                           {ui.voice_mode, ui.imported_code}, queue=False, **private)
    card_inputs = synthesis_inputs | {ui.card_name}
    ui.export_card.click(bind(export_card, ctx, ui), card_inputs, {ui.card_out, ui.speaker}, **model_work)
    ui.save_card.click(bind(save_to_library, ctx, ui), card_inputs, None, **model_work)
    ui.card_in.upload(bind(import_card, ui), ui.card_in,
                      {ui.voice_mode, ui.voice_seed, ui.speaker, ui.sample_text, ui.imported_code, ui.temperature,
                       ui.top_p, ui.top_k, ui.audio_seed, ui.text_seed, ui.refine, ui.oral, ui.laugh, ui.brk, ui.speed,
                       ui.card_name, ui.card_in}, **private)
    ui.device.change(bind(change_device, ui), ui.device, {ui.engine, ui.precision}, queue=False, **private)
    ui.engine.change(change_engine, [ui.device, ui.engine], ui.precision, queue=False, **private)
    for control in (ui.device, ui.precision, ui.threads, ui.engine):
        control.change(bind(update_settings, ui), {ui.device, ui.precision, ui.threads, ui.engine},
                       {ui.runtime, ui.in_use}, queue=False, **private)
    if ctx.serving and ctx.serving.fastest:
        ui.use_fastest.click(bind(apply_settings, ui, ctx.serving.fastest), None, ui.runtime_controls(), **private)


def _build_api(ctx: AppContext) -> None:
    """Hidden components behind the stable `/synthesize` API name, one per parameter of `api_synthesize` in its
    (documented) order, each starting from that parameter's default, so a script may pass only `text`."""
    with gr.Group(visible=False):
        inputs = [
            gr.Textbox(label="text"),
            gr.Textbox(label="voice", value=""),
            gr.Number(label="temperature", value=DEFAULT_SAMPLING.temperature),
            gr.Number(label="top_p", value=DEFAULT_SAMPLING.top_p),
            gr.Number(label="top_k", value=DEFAULT_SAMPLING.top_k, precision=0),
            gr.Number(label="audio_seed", value=None, precision=0),
            gr.Number(label="speed", value=DEFAULT_REQUEST.speed, precision=0),
            gr.Number(label="max_new_token", value=DEFAULT_REQUEST.max_new_token, precision=0),
            gr.Checkbox(label="split", value=False),
        ]
        out_audio = gr.Audio(type="filepath", label="audio")
        out_json = gr.JSON(label="measurements")
        trigger = gr.Button("synthesize")
    trigger.click(bind(api_synthesize, ctx), inputs, [out_audio, out_json], api_name="synthesize",
                  concurrency_id=SYNTHESIS_QUEUE, concurrency_limit=synthesis_concurrency(ctx))


def synthesis_concurrency(ctx: AppContext) -> int:
    """Requests let through to the batcher at once: enough to fill the next batches; Gradio queues the rest
    and shows each its place."""
    return 4 * ctx.batching.max_batch
