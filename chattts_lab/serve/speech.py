"""The one path from a UI or HTTP request to the library: validate, batch, load (cached), synthesize.

Every caller (the Generate button, the `/synthesize` API, the OpenAI-compatible route) goes through
`serve`/`serve_stream`, so requests from all of them that arrive together share one batched generation
(chattts_lab.serve.batcher), and all model work holds the one model lock a running sweep holds too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator

from chattts_lab import LoadedModel, SynthesisRequest, heap, load_model
from chattts_lab.serve.batch import Part, shared_settings, synthesize_parts
from chattts_lab.serve.batcher import Batcher
from chattts_lab.serve.policy import scheduling_for
from chattts_lab.serve.scheduler import ContinuousScheduler, Overloaded
from chattts_lab.models import loaded
from chattts_lab.requests import validate_request
from chattts_lab.requests import CONTINUOUS
from chattts_lab.synthesis import StreamChunk, SynthesisOutput, encode_sample_audio, speaker_from_seed, warm_up
from chattts_lab.voices import VoiceCard
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.runtime import RuntimeSettings, default_settings, describe
from chattts_lab.serve.uploads import read_audio_upload

log = logging.getLogger(__name__)


@dataclass
class Running:
    """Which sessions' syntheses hold or wait for the model now, so Interrupt only ever stops your own (every one
    of them: a session may have more than one request under way, e.g. the Generate button and the API)."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _by_session: dict = field(default_factory=dict)  # session -> the stop events of its running syntheses

    @contextmanager
    def mark(self, session: str | None):
        """Yields the stop event of this synthesis (pass it to synthesize)."""
        stop = threading.Event()
        with self._lock:
            self._by_session.setdefault(session, set()).add(stop)
        try:
            yield stop
        finally:
            with self._lock:
                running = self._by_session.get(session, set())
                running.discard(stop)
                if not running:
                    self._by_session.pop(session, None)

    def interrupt(self, session: str | None) -> bool:
        """Ask every synthesis of `session` to stop; False if it has none running."""
        with self._lock:
            stops = list(self._by_session.get(session, ()))
        for stop in stops:
            stop.set()
        return bool(stops)


RUNNING = Running()


def get_model(ctx: AppContext, settings: RuntimeSettings) -> LoadedModel:
    """The model for these settings, loading it on first use (cached by the library) and warming it up
    once, so the first result a person sees is not inflated by one-time JIT costs (callers say "loading"
    beforehand: see waiting_note)."""
    model = load_model(settings.load_config(ctx.policy.model))
    if not getattr(model, "webui_warmed", False):  # once per loaded model
        warm_up(model)
        heap.settle()  # full garbage collections stop walking the model: they stalled every stream for 0.3 s
        model.webui_warmed = True
    return model


def speaker_for_seed(ctx: AppContext, settings: RuntimeSettings, seed: int) -> str:
    with ctx.model_work:
        return speaker_from_seed(get_model(ctx, settings), int(seed))


def sample_audio_code(ctx: AppContext, settings: RuntimeSettings, path: str) -> str:
    wav, sr = read_audio_upload(path)  # refuses a wrong type, an oversize file or a long clip before decoding
    with ctx.model_work:
        return encode_sample_audio(get_model(ctx, settings), wav, sr)


def card_with_embedding(ctx: AppContext, settings: RuntimeSettings, card: VoiceCard) -> VoiceCard:
    """A card that reproduces anywhere: a seed-only voice gets the embedding its seed draws here."""
    from dataclasses import replace

    if card.speaker or card.sample_audio_code or card.seed is None:
        return card
    return replace(card, speaker=speaker_for_seed(ctx, settings, card.seed))


def serving_settings(ctx: AppContext) -> RuntimeSettings:
    """What a request runs on when it does not choose (the API routes, a fresh Synthesis tab)."""
    return ctx.serving.settings if ctx.serving else default_settings()


def waiting_note(ctx: AppContext, settings: RuntimeSettings) -> str:
    """What a request is about to wait for, in words."""
    if not is_ready(ctx, settings):
        return f"Loading and warming up {describe(settings)} (once)…"
    if ctx.model_work.locked() and not batcher(ctx).running:
        return "Waiting for the model: a benchmark run (or a voice-card job) has it; your request runs after it…"
    if scheduling(ctx, settings) == CONTINUOUS:
        waiting, busy, rows = scheduler(ctx, settings).status()
        if busy + 1 > rows or waiting:
            return f"Queued: all {rows} rows are generating, {waiting} request(s) ahead; yours joins when a row frees…"
        return f"Synthesizing (joins the running generation: {busy} of {rows} rows busy)…"
    ahead = batcher(ctx).waiting()
    return f"Queued behind {ahead} request(s)…" if ahead else "Synthesizing…"


def is_ready(ctx: AppContext, settings: RuntimeSettings) -> bool:
    """Loaded and warmed up: a request for these settings starts without start-up work."""
    model = loaded(settings.load_config(ctx.policy.model))
    return bool(model is not None and getattr(model, "webui_warmed", False))


def preload(ctx: AppContext, settings: RuntimeSettings) -> threading.Thread:
    """Load and warm up the serving configuration in the background as the app starts, so the first request
    pays no start-up work (a request that comes sooner waits for it, shown as loading)."""
    def load():
        try:
            with ctx.model_work:
                get_model(ctx, settings)
            log.info("preloaded %s %s %s on %s", ctx.policy.model, settings.engine, settings.precision, settings.device)
        except Exception:  # the first request will load again and report the error to its caller
            log.exception("preloading the model failed")

    thread = threading.Thread(target=load, name="preload", daemon=True)
    thread.start()
    return thread


@functools.cache
def batcher(ctx: AppContext) -> Batcher:
    """The app's one batcher: every entry point's requests meet here."""
    def run_batch(key, parts: list[Part]) -> list[tuple[SynthesisOutput, LoadedModel]]:
        settings, stream, _ = key
        asked = time.perf_counter()
        with ctx.model_work:  # a sweep, or a voice-card job, has the model: the batch waits
            for part in parts:  # and that wait is queueing too (X-ChatTTS-Queue-S counts every wait)
                part.queue_wait_s += time.perf_counter() - asked
            model = get_model(ctx, settings)
            return [(out, model) for out in synthesize_parts(model, parts, stream=stream)]

    return Batcher(run_batch, ctx.policy.request_level())


def scheduling(ctx: AppContext, settings: RuntimeSettings) -> str:
    """Which scheduling a request on these settings gets: continuous where the engine's loop admits rows mid-run."""
    return scheduling_for(ctx.policy.batching, settings.engine)


@functools.cache
def scheduler(ctx: AppContext, settings: RuntimeSettings) -> ContinuousScheduler:
    """The continuous-batching loop of one serving configuration (its thread holds `model_work` while busy)."""
    return ContinuousScheduler(lambda: get_model(ctx, settings), ctx.policy.rows(), hold=lambda: ctx.model_work)


async def serve(ctx: AppContext, settings: RuntimeSettings, request: SynthesisRequest, session: str | None = None,
                on_chunk=None, continues: bool = False) -> tuple[SynthesisOutput, LoadedModel]:
    """One request's result: joining the running generation (continuous batching, on an engine that admits rows) or
    made in a batch with the requests that arrive with it and can share one (request-level batching).

    A bad request fails here, alone, before it joins a batch; a full queue refuses it at once (Overloaded), unless it
    `continues` a request already taken (its next sentence: counted when that request arrived).
    `on_chunk(StreamChunk)` (called from the worker thread) makes it a streamed request. Interrupt (by session)
    stops only this request."""
    request = validate_request(request)
    with RUNNING.mark(session) as stop:
        part = Part(request, stop, on_chunk, continues=continues)
        if scheduling(ctx, settings) == CONTINUOUS:
            future = scheduler(ctx, settings).submit(part)
            try:
                out = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                stop.set()  # the caller went away: its rows end at the next step
                raise
            return out, loaded(settings.load_config(ctx.policy.model))
        if batcher(ctx).waiting() >= ctx.policy.max_queue and not continues:
            raise Overloaded(f"the server is at capacity: {batcher(ctx).waiting()} requests waiting",
                             retry_after_s=5)
        key = (settings, on_chunk is not None, shared_settings(request))
        return await batcher(ctx).submit(key, part)


async def serve_stream(ctx: AppContext, settings: RuntimeSettings, request: SynthesisRequest,
                       session: str | None = None, continues: bool = False,
                       ) -> AsyncIterator[StreamChunk | tuple[SynthesisOutput, LoadedModel]]:
    """Yields each StreamChunk of this request as its batch makes it, then (SynthesisOutput, LoadedModel)
    (`continues` as in serve)."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue = asyncio.Queue()
    done = asyncio.ensure_future(
        serve(ctx, settings, request, session, lambda chunk: loop.call_soon_threadsafe(chunks.put_nowait, chunk),
              continues))
    # The worker thread schedules its chunks before its result, so this end mark comes after the last chunk.
    done.add_done_callback(lambda _: chunks.put_nowait(None))
    try:
        while (chunk := await chunks.get()) is not None:
            yield chunk
        yield done.result()
    finally:
        done.cancel()  # the caller went away: its part stops (no effect once finished)

