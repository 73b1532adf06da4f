"""Synthesis tab: try voices in a browser. Plain handlers first, then the builder, then the wiring."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr
import numpy as np

from chattts_lab import InvalidRequest, ModelUnavailable, Refine, Sampling, SynthesisOutput, SynthesisRequest, Voice
from chattts_lab import audio as audio_io
from chattts_lab.synthesis import SAMPLE_RATE, StreamChunk
from chattts_lab.voices import PRESET_VOICES, VoiceCard, parse_card, resolve_voice, save_card, split_sentences
from webui import present, speech
from webui.context import MODEL_QUEUE, AppContext, bind
from webui.runtime import RuntimeSettings, default_settings, devices, engines_for, max_threads, precisions_for, settings_from

VOICE_MODES = ("Seed / preset", "Speaker string", "Sample audio")
EXAMPLES = [
    ["四川美食确实以辣闻名，但也有不辣的选择。比如甜水面、赖汤圆、蛋烘糕、叶儿粑等，这些小吃口味温和，甜而不腻，也很受欢迎。"],
    ["Hello! This is ChatTTS Lab. It measures how fast text to speech runs on the machine in front of you."],
    ["我最近在学 English，每天 practice 半个小时 [uv_break] 感觉进步还挺明显的。"],
    ["That joke was so bad [laugh] that I had to hear it twice [uv_break] and it got worse."],
]
USER_ERRORS = (InvalidRequest, ModelUnavailable, ValueError)


@dataclass(frozen=True)
class Form:
    """The synthesis controls, in the order they are passed to handlers."""

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
    audio_seed: float | None
    text_seed: float | None
    refine: bool
    oral: int
    laugh: int
    brk: int
    speed: int
    max_new_token: int
    min_new_token: int


def _seed(value) -> int | None:
    return None if value is None or value == "" else int(value)


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


def generate(ctx: AppContext, settings: RuntimeSettings, imported_code, request: gr.Request,
             progress=gr.Progress(), *values):
    """Generate button: yields (stream chunk, audio file, measurements, metrics text, banner).

    (Gradio injects `request` and `progress` only into parameters before `*values`.)"""
    form = Form(*values)
    session = request.session_hash if request else None
    try:
        req = build_request(ctx, settings, form, imported_code)
        if not form.stream:
            out, model = speech.run(ctx, settings, req, session, progress)
            path, m = _result(ctx, out, model)
            banner = present.banner_html(out.synthetic, model.source.note)
            yield None, gr.update(value=path, autoplay=True), m, present.metrics_markdown(m), banner
            return
        yield from _generate_stream(ctx, settings, req, session, live_playback(), progress)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc), duration=None) from exc


def live_playback() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the stream is measured and played at the end."""
    return shutil.which("ffmpeg") is not None


def _generate_stream(ctx: AppContext, settings: RuntimeSettings, req: SynthesisRequest, session, live: bool,
                     progress=None):
    # Sentences stream one after another, so playback follows the text's order.
    parts, measurements, ttfa = [], [], None
    for text in req.texts:
        for model, item in speech.run_stream(ctx, settings, replace(req, texts=(text,)), session, progress):
            banner = present.banner_html(model.synthetic, model.source.note)
            if isinstance(item, StreamChunk):
                if ttfa is None:
                    ttfa = item.elapsed_s
                    note = "" if live else " (install ffmpeg for live playback; the audio plays when done)"
                    yield gr.skip(), gr.skip(), gr.skip(), f"**time to first audio** {ttfa:.2f} s · streaming…{note}", banner
                if live:
                    yield (SAMPLE_RATE, item.audio[0]), gr.skip(), gr.skip(), gr.skip(), banner
            else:
                parts.append(item)
                measurements.append(item.measurements.as_dict())
        if parts and parts[-1].measurements.interrupted:
            break
    joined = replace(parts[0], audio=[audio_io.join([a for p in parts for a in p.audio])])
    extra = {"parts": measurements} if len(measurements) > 1 else {}
    path, m = _result(ctx, joined, model, extra)
    yield gr.skip(), gr.update(value=path, autoplay=not live), m, present.metrics_markdown(m), banner


def interrupt(request: gr.Request = None):
    if not speech.RUNNING.interrupt(request.session_hash if request else None):
        gr.Info("Nothing of yours is running.")
    else:
        gr.Info("Interrupting after the current step; you keep the audio made so far.")


def roll_dice():
    return random.randint(1, 99_999), VOICE_MODES[0], None


def pick_preset(name):
    if not name:
        return gr.skip(), gr.skip()
    return PRESET_VOICES[name], VOICE_MODES[0]


def show_speaker(ctx: AppContext, settings: RuntimeSettings, seed):
    if seed is None:
        raise gr.Error("set a voice seed first")
    return speech.speaker_for_seed(ctx, settings, int(seed)), VOICE_MODES[1]


def _card_from_form(ctx, settings, form: Form, name: str, imported_code) -> VoiceCard:
    voice = _voice(ctx, settings, form, imported_code)
    req = build_request(ctx, settings, replace(form, text="card", split=False), imported_code)
    card = VoiceCard(
        name=(name or "voice").strip()[:64] or "voice",
        speaker=voice.speaker,
        seed=voice.seed,
        sample_audio_code=voice.sample_audio_code,
        sample_text=voice.sample_text,
        sampling=req.sampling,
        refine=req.refine,
        speed=req.speed,
    )
    return speech.card_with_embedding(ctx, settings, card)


def export_card(ctx: AppContext, settings: RuntimeSettings, imported_code, name: str, *values):
    """Export button: the voice as a small JSON file that reproduces it on another machine."""
    try:
        card = _card_from_form(ctx, settings, Form(*values), name, imported_code)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    folder = ctx.files_dir / f"card-{random.randint(0, 16**8):08x}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(card.name).name or 'voice'}.voice.json"
    path.write_text(card.to_json(), encoding="utf-8")
    return str(path), card.speaker or gr.skip()


def save_to_library(ctx: AppContext, settings: RuntimeSettings, imported_code, name: str, *values):
    try:
        card = _card_from_form(ctx, settings, Form(*values), name, imported_code)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    save_card(card, ctx.voices_dir)
    gr.Info(f"Saved voice '{card.name}': the OpenAI-compatible endpoint now accepts voice='{card.name}'.")


def import_card(file):
    """Import: fill the voice and sampling controls from a card (parsed strictly as data)."""
    if not file:
        return [gr.skip()] * 17
    try:
        card = parse_card(Path(file).read_bytes()[: 2 * 1024 * 1024])
    except USER_ERRORS as exc:
        # A warning, not an error: an error would cover every voice control with an error overlay.
        gr.Warning(f"Could not import that voice card: {exc}", duration=None)
        return [gr.skip()] * 16 + [None]
    mode = VOICE_MODES[1] if card.speaker else VOICE_MODES[2] if card.sample_audio_code else VOICE_MODES[0]
    s, r = card.sampling, card.refine
    gr.Info(f"Imported voice '{card.name}'.")
    return [
        mode, card.seed, card.speaker or "", card.sample_text or "",
        s.temperature, s.top_p, s.top_k, s.audio_seed, s.text_seed,
        r.enabled, r.oral, r.laugh, r.break_, card.speed, card.name, card.sample_audio_code, None,
    ]


def change_device(device):
    engines = engines_for(device)
    return gr.update(choices=engines, value="stock"), gr.update(choices=precisions_for(device, "stock"), value="fp32")


def change_engine(device, engine):
    return gr.update(choices=precisions_for(device, engine), value="fp32")


def update_settings(device, precision, threads, engine) -> RuntimeSettings:
    return settings_from(device, precision, threads, engine)


def apply_settings(settings: RuntimeSettings | dict | None):
    """Put recommended settings into the runtime controls (and the per-user state)."""
    if not settings:
        raise gr.Error("No recommendation yet: run a sweep in the Benchmark tab first.")
    s = settings if isinstance(settings, RuntimeSettings) else settings_from(**settings)
    gr.Info(f"Applied {s.device} · {s.precision} · {s.threads} threads · {s.engine} engine.")
    return (gr.update(value=s.device), gr.update(choices=engines_for(s.device), value=s.engine),
            gr.update(choices=precisions_for(s.device, s.engine), value=s.precision), s.threads, s)


def api_synthesize(ctx: AppContext, text: str, voice: str, temperature: float, top_p: float, top_k: float, audio_seed, speed: float,
                   max_new_token: float, split: bool):
    """The `/synthesize` API: text and a voice (preset name, seed:N, speaker string or voice card JSON)
    -> (audio file path, measurements dict)."""
    try:
        card = resolve_voice(voice, ctx.voices_dir) if (voice or "").strip() else VoiceCard(name="default")
        texts = split_sentences(text) if split else [text]
        req = SynthesisRequest.of(
            texts or [""], voice=card.voice,
            sampling=Sampling(float(temperature), float(top_p), int(top_k), _seed(audio_seed)),
            speed=int(speed), max_new_token=int(max_new_token),
        )
        out, model = speech.run(ctx, default_settings(), req)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    return _result(ctx, out, model)


# ----------------------------------------------------------------------------------------------
# Builder


@dataclass
class SynthesisTab:
    runtime: gr.State
    apply_best: gr.Button
    device: gr.Dropdown
    engine: gr.Dropdown
    precision: gr.Dropdown
    threads: gr.Slider


def build_synthesis_tab(ctx: AppContext) -> SynthesisTab:
    runtime = gr.State(default_settings())
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
            with gr.Accordion("Voice card: export / import", open=False, elem_id="card-accordion"):
                gr.Markdown("A small JSON with the speaker embedding, seeds and parameters: the voice reproduces "
                            "on another machine. Saved cards are also voices for the OpenAI-compatible endpoint.")
                with gr.Row():
                    card_name = gr.Textbox(label="Voice name", value="my-voice", elem_id="card-name")
                    export_btn = gr.Button("Export voice card", elem_id="export-card")
                    save_btn = gr.Button("Save to voice library", elem_id="save-card")
                with gr.Row():
                    card_out = gr.File(label="Voice card (download)", elem_id="card-out", height=120)
                    card_in = gr.File(label="Import a voice card", file_types=[".json"], elem_id="card-in", height=120)
            with gr.Accordion("Sampling", open=False):
                with gr.Row():
                    temperature = gr.Slider(0.01, 1.0, value=0.3, step=0.01, label="Temperature", elem_id="temperature")
                    top_p = gr.Slider(0.1, 1.0, value=0.7, step=0.05, label="Top-P")
                    top_k = gr.Slider(1, 50, value=20, step=1, label="Top-K")
                with gr.Row():
                    audio_seed = gr.Number(value=None, precision=0, label="Sampling seed (blank: random)", minimum=0)
                    text_seed = gr.Number(value=None, precision=0, label="Text seed (refine)", minimum=0)
                    speed = gr.Slider(0, 9, value=5, step=1, label="Speed")
                with gr.Row():
                    refine = gr.Checkbox(label="Refine text first", value=False)
                    oral = gr.Slider(0, 9, value=2, step=1, label="Oral")
                    laugh = gr.Slider(0, 2, value=0, step=1, label="Laugh")
                    brk = gr.Slider(0, 7, value=6, step=1, label="Break")
                with gr.Row():
                    max_new_token = gr.Slider(1, 2048, value=2048, step=1, label="Max audio tokens (46.9 per second)",
                                              elem_id="max-new-token")
                    min_new_token = gr.Slider(0, 2048, value=0, step=1, label="Min audio tokens",
                                              elem_id="min-new-token")
            with gr.Accordion("Runtime", open=False):
                with gr.Row():
                    device = gr.Dropdown(devices(), value="cpu", label="Device", elem_id="device")
                    engine = gr.Dropdown(engines_for("cpu"), value="stock", label="Engine", elem_id="engine")
                    precision = gr.Dropdown(precisions_for("cpu", "stock"), value="fp32", label="Precision", elem_id="precision")
                    threads = gr.Slider(1, max_threads(), value=max_threads(), step=1, label="Threads", elem_id="threads")
                apply_best = gr.Button("Apply the best configuration from the benchmark", elem_id="apply-best-synth")
        with gr.Column(scale=2):
            banner = gr.HTML(elem_id="banner")
            stream_audio = gr.Audio(label="Stream", streaming=True, autoplay=True, visible=False, elem_id="stream-audio")
            audio = gr.Audio(label="Audio", type="filepath", autoplay=True, buttons=["download"], elem_id="audio",
                             interactive=False)
            metrics = gr.Markdown(elem_id="metrics")
            with gr.Accordion("Raw measurements (JSON)", open=False):
                measurements = gr.JSON(label="Measurements", elem_id="measurements")

    form = [text, split, stream, voice_mode, voice_seed, speaker, sample_audio, sample_text, temperature, top_p, top_k,
            audio_seed, text_seed, refine, oral, laugh, brk, speed, max_new_token, min_new_token]
    generate_btn.click(bind(generate, ctx), [runtime, imported_code] + form, [stream_audio, audio, measurements, metrics, banner],
                             concurrency_id=MODEL_QUEUE, concurrency_limit=1, api_visibility="private")
    text.submit(bind(generate, ctx), [runtime, imported_code] + form, [stream_audio, audio, measurements, metrics, banner],
                concurrency_id=MODEL_QUEUE, concurrency_limit=1, api_visibility="private")
    interrupt_btn.click(interrupt, None, None, queue=False, api_visibility="private")
    stream.change(lambda s: gr.update(visible=s), stream, stream_audio, queue=False, api_visibility="private")
    dice.click(roll_dice, None, [voice_seed, voice_mode, preset], queue=False, api_visibility="private")
    preset.change(pick_preset, preset, [voice_seed, voice_mode], queue=False, api_visibility="private")
    show_spk.click(bind(show_speaker, ctx), [runtime, voice_seed], [speaker, voice_mode], concurrency_id=MODEL_QUEUE,
                   api_visibility="private")
    sample_audio.upload(lambda: (VOICE_MODES[2], None), None, [voice_mode, imported_code], queue=False, api_visibility="private")
    export_btn.click(bind(export_card, ctx), [runtime, imported_code, card_name] + form, [card_out, speaker],
                     concurrency_id=MODEL_QUEUE, api_visibility="private")
    save_btn.click(bind(save_to_library, ctx), [runtime, imported_code, card_name] + form, None, concurrency_id=MODEL_QUEUE,
                   api_visibility="private")
    card_in.upload(import_card, card_in, [voice_mode, voice_seed, speaker, sample_text, temperature, top_p, top_k,
                                          audio_seed, text_seed, refine, oral, laugh, brk, speed, card_name,
                                          imported_code, card_in], api_visibility="private")
    device.change(change_device, device, [engine, precision], queue=False, api_visibility="private")
    engine.change(change_engine, [device, engine], precision, queue=False, api_visibility="private")
    for control in (device, precision, threads, engine):
        control.change(update_settings, [device, precision, threads, engine], runtime, queue=False, api_visibility="private")
    _build_api(ctx, form)
    return SynthesisTab(runtime, apply_best, device, engine, precision, threads)


def _build_api(ctx: AppContext, form) -> None:
    """Hidden components behind the stable `/synthesize` API name (simple inputs for scripts)."""
    with gr.Group(visible=False):
        voice = gr.Textbox(label="voice", value="")
        split = gr.Checkbox(label="split", value=False)
        out_audio = gr.Audio(type="filepath", label="audio")
        out_json = gr.JSON(label="measurements")
        trigger = gr.Button("synthesize")
    text, temperature, top_p, top_k, audio_seed, speed, max_new_token = (form[0], form[8], form[9], form[10], form[11],
                                                                          form[17], form[18])
    trigger.click(bind(api_synthesize, ctx), [text, voice, temperature, top_p, top_k, audio_seed, speed, max_new_token, split],
                  [out_audio, out_json], api_name="synthesize", concurrency_id=MODEL_QUEUE, concurrency_limit=1)
