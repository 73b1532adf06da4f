"""The Synthesis tab's handlers for generating audio, the runtime controls and the `/synthesize` API."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import replace

import gradio as gr

from chattts_lab import Sampling, SynthesisOutput, SynthesisRequest
from chattts_lab import audio as audio_io
from chattts_lab.synthesis import SAMPLE_RATE, StreamChunk
from chattts_lab.voices import VoiceCard, resolve_voice, split_sentences
from webui import present, speech
from webui.context import AppContext
from webui.runtime import RuntimeSettings, describe, engines_for, precisions_for, settings_from
from webui.synthesis_components import SynthesisTab
from webui.synthesis_form import DEFAULT_REQUEST, DEFAULT_SAMPLING, USER_ERRORS, Form, _seed, build_request


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

def change_device(ui: SynthesisTab, device):
    return {ui.engine: gr.update(choices=engines_for(device), value="stock"),
            ui.precision: gr.update(choices=precisions_for(device, "stock"), value="fp32")}


def change_engine(device, engine):
    return gr.update(choices=precisions_for(device, engine), value="fp32")


def update_settings(ui: SynthesisTab, values: dict):
    settings = settings_from(values[ui.device], values[ui.precision], values[ui.threads], values[ui.engine])
    return {ui.runtime: settings, ui.in_use: in_use_note(settings, "chosen on this page")}


def in_use_note(settings: RuntimeSettings, why: str) -> str:
    return f"**In use:** {describe(settings)} ({why})."


def apply_settings(ui: SynthesisTab, settings: RuntimeSettings | dict | None):
    """Put recommended settings into the runtime controls (and the per-user state)."""
    if not settings:
        raise gr.Error("No recommendation yet: run a sweep in the Benchmark tab first.")
    s = settings if isinstance(settings, RuntimeSettings) else settings_from(**settings)
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
