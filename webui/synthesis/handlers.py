"""The Synthesis tab's handlers for generating audio, the runtime controls and the `/synthesize` API."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import fields, replace

import gradio as gr

from chattts_lab import Sampling, SynthesisOutput, SynthesisRequest
from chattts_lab import audio as audio_io
from chattts_lab.trackers.stages import StageTimes
from chattts_lab.synthesis import SAMPLE_RATE, Measurements, StreamChunk
from chattts_lab.said import Said
from chattts_lab.voices import VoiceCard, resolve_voice, split_sentences
from chattts_lab.serve import speech
from chattts_lab.serve import zerogpu
from webui.common import present
from webui.common.events import LatestWins, session_of
from chattts_lab.serve.context import AppContext
from webui.i18n.texts import localized, wants_chinese
from chattts_lab.serve.runtime import (CHOSEN, ON_THIS_PAGE, RuntimeSettings, ServingChoice, describe, engines_for,
                                       precisions_for, serving_choice, settings_from)
from webui.synthesis.form import (DEFAULT_REQUEST, DEFAULT_SAMPLING, USER_ERRORS, build_requests, Form, _seed,
                                  SynthesisTab)


def _result(ctx: AppContext, out: SynthesisOutput, model, extra: dict | None = None):
    path = audio_io.write_wav(audio_io.join(out.audio, out.sample_rate), ctx.audio_dir)
    m = out.measurements.as_dict()
    m.update(extra or {})
    m["synthetic"] = out.synthetic
    m["model"] = model.source.label
    return str(path), m


async def generate(ctx: AppContext, ui: SynthesisTab, values: dict, request: gr.Request):
    """Generate button: yields updates of the player, the stream, the measurements and the banner. A mistake is a
    warning that closes by itself, and the results on screen stay (an error would cover each with a red badge)."""
    form, session = Form.read(ui, values), session_of(request)
    try:
        settings = ui.settings_shown(values)  # what the controls show (a combination that cannot run: a warning)
        # In a thread: a sample-audio voice is encoded by the model, which may be busy with a sweep.
        reqs = await asyncio.to_thread(build_requests, ctx, settings, form, values[ui.imported_code])
        # What the request waits for, where its result will be; the player alone shows Gradio's timer.
        yield {ui.metrics: speech.waiting_note(ctx, settings)}
        if not form.stream or zerogpu.active():  # on ZeroGPU one call makes the whole result
            yield await _generate_batches(ctx, ui, settings, reqs, session, request)
            return
        async for update in _generate_stream(ctx, ui, settings, [t for r in reqs for t in r.texts], reqs[0],
                                             session, live_playback(), request):
            yield update
    except USER_ERRORS as exc:
        present.warn(str(exc), request)
        yield {ui.metrics: values[ui.metrics]}


async def _generate_batches(ctx: AppContext, ui: SynthesisTab, settings: RuntimeSettings,
                            reqs: list[SynthesisRequest], session, request=None) -> dict:
    """The batches one after another (a long text split into sentences may need several), joined in order."""
    if zerogpu.active():  # one call on the lent GPU makes every batch
        made = await zerogpu.serve(ctx, settings, reqs)
        outs, model = [out for out, _ in made], made[-1][1]
    else:
        outs = []
        for req in reqs:
            out, model = await speech.serve(ctx, settings, req, session, continues=bool(outs))  # (counted at the first)
            outs.append(out)
            if out.measurements.interrupted:
                break
    joined = outs[0] if len(outs) == 1 else replace(outs[0], audio=[a for o in outs for a in o.audio],
                                                    measurements=_merged([o.measurements for o in outs]))
    path, m = _result(ctx, joined, model, {"batches": len(outs)} if len(outs) > 1 else None)
    return {ui.audio: path, ui.measurements: m,
            ui.metrics: present.metrics_markdown(m, request),
            ui.banner: present.banner_html(joined.synthetic, model.source.note, request)}


def _merged(parts: list[Measurements]) -> Measurements:
    """Batches run one after another, as one measurement: times add up, memory is the highest seen."""
    stages = StageTimes(**{f.name: sum(getattr(p.stages, f.name) for p in parts) for f in fields(StageTimes)})
    devices = [p.peak_device_mb for p in parts if p.peak_device_mb is not None]
    return replace(parts[0], wall_s=sum(p.wall_s for p in parts), stages=stages,
                   tokens=[t for p in parts for t in p.tokens], gpt_steps=sum(p.gpt_steps for p in parts),
                   audio_s=[a for p in parts for a in p.audio_s], peak_rss_mb=max(p.peak_rss_mb for p in parts),
                   peak_device_mb=max(devices) if devices else None, interrupted=parts[-1].interrupted,
                   interrupted_reason=parts[-1].interrupted_reason,
                   queue_wait_s=sum(p.queue_wait_s for p in parts))


def live_playback() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the stream is measured and played at the end."""
    return shutil.which("ffmpeg") is not None


def stream_players(ui: SynthesisTab, live: bool, stream: bool) -> dict:
    """Streaming on (and playing live): the Stream player, then the whole result in a player that stays quiet, since
    the Stream player has played it; otherwise the one player that plays each result as it is made."""
    streaming = bool(stream and live)
    return {ui.stream_audio: gr.update(visible=streaming), ui.streamed: gr.update(visible=streaming),
            ui.audio: gr.update(visible=not streaming)}


async def _generate_stream(ctx: AppContext, ui: SynthesisTab, settings: RuntimeSettings, texts: list[str],
                           req: SynthesisRequest, session, live: bool, request=None):
    # Sentences stream one after another, so playback follows the text's order. Time to first audio is
    # what the person waited: the queue included. The last result leaves the player: it is not this one.
    # Played live, the whole result goes to a player that never autoplays (the Stream player has played it);
    # without ffmpeg nothing played yet, so it goes to the player that autoplays.
    player = ui.streamed if live else ui.audio
    yield {player: None}
    parts, measurements, ttfa, started = [], [], None, time.perf_counter()
    for text in texts:
        sentence = replace(req, texts=(text,))
        async for item in speech.serve_stream(ctx, settings, sentence, session, continues=bool(parts)):
            if isinstance(item, StreamChunk):
                banner = present.banner_html(item.synthetic, request=request)
                if ttfa is None:
                    ttfa = time.perf_counter() - started
                    zh = wants_chinese(request)
                    note = "" if live else ("（安装 ffmpeg 可边生成边播放；音频在生成完后播放）" if zh else
                                            " (install ffmpeg for live playback; the audio plays when done)")
                    yield {ui.metrics: (f"**首段音频时间** {ttfa:.2f} s · 流式生成中……{note}" if zh else
                                        f"**time to first audio** {ttfa:.2f} s · streaming…{note}"), ui.banner: banner}
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
    yield {player: path, ui.measurements: m,
           ui.metrics: present.metrics_markdown(m, request),
           ui.banner: present.banner_html(model.synthetic, model.source.note, request)}


def interrupt(request: gr.Request = None):
    if not speech.RUNNING.interrupt(session_of(request)):
        present.info("Nothing of yours is running.", request)
    else:
        present.info("Interrupting after the current step; you keep the audio made so far.", request)


# Device and engine choices narrow the lists after them. These run on a person's pick only (`.input`, not
# `.change`): a change made by Apply or "Use the fastest" sets all the controls at once and must not be reset.
# The runtime controls' picks settle outside the queue, side by side, and "Use the fastest" or Apply may set them
# meanwhile: of these, the one sent last is the one that shows (a pick's older values, ending later, shows nothing).
RUNTIME_PICKS = LatestWins()


# Each pick is one event that sets the narrowed controls, the `runtime` state and the note together, so whichever
# event lands last (a pick, "Use the fastest", a refresh) leaves the three agreeing: a second event chained with
# `.then` could land after a queued "Use the fastest" and put the earlier pick back into the state alone.
def change_device(ui: SynthesisTab, values: dict, request: gr.Request = None):
    ticket = RUNTIME_PICKS.arrived(request)
    engines = engines_for(values[ui.device])
    engine = values[ui.engine] if values[ui.engine] in engines else engines[0]
    return RUNTIME_PICKS.shown(request, ticket, {ui.engine: gr.update(choices=engines, value=engine),
                                                 **_engine_picked(ui, values, engine, request)})


def change_engine(ui: SynthesisTab, values: dict, request: gr.Request = None):
    ticket = RUNTIME_PICKS.arrived(request)
    return RUNTIME_PICKS.shown(request, ticket, _engine_picked(ui, values, values[ui.engine], request))


def _engine_picked(ui: SynthesisTab, values: dict, engine: str, request=None) -> dict:
    """The precisions `engine` runs on the device (the one chosen kept where it still runs), and the pick settled."""
    device, choices = values[ui.device], precisions_for(values[ui.device], engine)
    precision = values[ui.precision] if values[ui.precision] in choices else choices[0]
    return {ui.precision: gr.update(choices=choices, value=precision),
            **_picked(ui, device, precision, values[ui.threads], engine, request)}


def update_settings(ui: SynthesisTab, values: dict, request: gr.Request = None):
    """A pick of precision or threads: the state and the note follow the controls."""
    ticket = RUNTIME_PICKS.arrived(request)
    return RUNTIME_PICKS.shown(request, ticket, _picked(ui, values[ui.device], values[ui.precision],
                                                        values[ui.threads], values[ui.engine], request))


def _picked(ui: SynthesisTab, device: str, precision: str, threads, engine: str, request=None) -> dict:
    try:
        settings = settings_from(device, precision, threads, engine)
    except ValueError as exc:  # what cannot run here is refused with the reason, never replaced
        raise gr.Error(str(exc), duration=present.WARNING_S) from None
    return {ui.runtime: settings, ui.chosen: True, ui.in_use: in_use_note(settings, ON_THIS_PAGE, request)}


def in_use_note(settings: RuntimeSettings, why: str, request=None) -> str:
    """What requests run on and why, in the language of `request`'s browser."""
    return localized(Said("**In use:** {settings} ({why}).", settings=describe(settings), why=why), request)


def apply_settings(ui: SynthesisTab, settings: RuntimeSettings | dict | None, request: gr.Request = None):
    """Put recommended settings into the runtime controls (and the per-user state)."""
    ticket = RUNTIME_PICKS.arrived(request)
    if not settings:
        raise present.error("No recommendation yet: run a sweep in the Benchmark tab first.", request)
    try:
        s = settings if isinstance(settings, RuntimeSettings) else settings_from(**settings)
    except ValueError as exc:
        raise gr.Error(str(exc), duration=present.WARNING_S) from None
    present.info(Said("Applied {device} · {precision} · {threads} · {engine} engine.", device=s.device,
                           precision=s.precision, threads=Said("{n} {thread}", n=s.threads,
                                                               thread="thread" if s.threads == 1 else "threads"),
                           engine=s.engine), request)
    return RUNTIME_PICKS.shown(request, ticket, {**_controls_showing(ui, s), ui.chosen: True,
                                                 ui.in_use: in_use_note(s, ON_THIS_PAGE, request)})


def _controls_showing(ui: SynthesisTab, s: RuntimeSettings) -> dict:
    return {ui.device: gr.update(value=s.device), ui.engine: gr.update(choices=engines_for(s.device), value=s.engine),
            ui.precision: gr.update(choices=precisions_for(s.device, s.engine), value=s.precision),
            ui.threads: s.threads, ui.runtime: s}


def fastest_offer(serving: ServingChoice) -> RuntimeSettings | None:
    """What "Use the fastest" applies: the faster configuration runtime.py names, else its recommendation."""
    return serving.fastest or (serving.settings if serving.reason.startswith("the recommendation") else None)


def fastest_label(settings: RuntimeSettings | None, request=None) -> str:
    """The button's text, in the language of `request`'s browser."""
    label = Said("Use the fastest: {settings}", settings=describe(settings)) if settings else "Use the fastest"
    return localized(label, request)


def refresh_serving(ctx: AppContext, ui: SynthesisTab, values: dict, request: gr.Request = None) -> dict:
    """After a sweep (and when a page opens): what runtime.serving_choice says now. A configuration chosen on the
    page (or on the command line) is kept; otherwise the page runs on the new choice, and says why."""
    serving, current = serving_choice(ctx.history_db, ctx.policy.model), values[ui.runtime]
    out = {}
    # `chosen`, not the note's words: the note is the page's copy from when the event was sent, and a pick made
    # since (settled at once, outside the queue) would be undone by a refresh that waited in the queue
    if not values[ui.chosen]:  # on this page, or on the app's command line
        # Only what changed is set: a person's first pick on a page just opened must not be undone.
        if serving.settings != current:
            current = serving.settings
            out = _controls_showing(ui, current)
        if in_use_note(current, serving.reason, request) != values[ui.in_use]:
            out[ui.in_use] = in_use_note(current, serving.reason, request)
    elif (ctx.serving and ctx.serving.reason.startswith(CHOSEN) and current == ctx.serving.settings
          and values[ui.in_use] == in_use_note(ctx.serving.settings, ctx.serving.reason)):
        # chosen on the command line: the page was built with the note in English, for every browser
        if (said := in_use_note(ctx.serving.settings, ctx.serving.reason, request)) != values[ui.in_use]:
            out[ui.in_use] = said
    best = fastest_offer(serving)
    return {**out, ui.fastest: best, ui.use_fastest: gr.update(value=fastest_label(best, request),
                                                               visible=best not in (None, current))}


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
        if zerogpu.active():
            ((out, model),) = await zerogpu.serve(ctx, speech.serving_settings(ctx), [req])
        else:
            out, model = await speech.serve(ctx, speech.serving_settings(ctx), req)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    return _result(ctx, out, model)
