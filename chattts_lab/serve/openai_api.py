"""An OpenAI-compatible speech endpoint served beside the UI: `POST /v1/audio/speech`.

Tools that speak OpenAI's audio API can point their base URL at a LAN-shared ChatTTS Lab. `voice`
resolves to a preset name, `seed:N`, or a voice card saved from the Synthesis tab. `model` is
accepted and ignored (the server runs the one model it was started with). `speed` (0.25-4.0)
maps to ChatTTS's [speed_0..9]. With --auth user:pass, send `Authorization: Bearer user:pass`.

Like OpenAI's own route, audio is sent as it is generated (chunked transfer) for pcm, wav and mp3;
flac, and any request with the extension `"stream": false`, gets one whole file. Every refusal,
FastAPI's request validation included, is an OpenAI-shaped error whose message OpenAI's clients show
(chattts_lab/serve/openai_errors.py).

The route is the same wherever the audio is made: a SpeechBackend synthesizes. The app's is AppSpeech (its own
batcher, beside the UI); a Ray Serve deployment's replicas are another (chattts_lab/serve/rayserve.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import AsyncIterator, Literal, Protocol

from fastapi import APIRouter, Depends, Header
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field

from chattts_lab import InvalidRequest, SynthesisRequest
from chattts_lab import audio as audio_io
from chattts_lab.requests import MAX_BATCH, MAX_NEW_TOKEN, validate_request
from chattts_lab.requests import CONTINUOUS
from chattts_lab.synthesis import StreamChunk, SynthesisOutput
from chattts_lab.voices import PRESET_VOICES, resolve_voice, saved_card_names, split_sentences
from chattts_lab.serve import speech
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.openai_errors import OpenAIError, OpenAIErrorsRoute, as_openai_errors
from chattts_lab.serve.runtime import describe

log = logging.getLogger(__name__)

MAX_INPUT_CHARS = 4096  # OpenAI's own limit for this endpoint
ROUTES = {"/v1/audio/speech": "POST", "/v1/audio/voices": "GET"}


class SpeechBody(BaseModel):
    model: str = "chattts"
    input: str
    voice: str = "Aria"
    response_format: str = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio"] = "audio"  # OpenAI's other choice, "sse" (JSON events), is not offered
    stream: bool = True  # extension: false waits for the whole clip and sends one file with its lengths set
    max_new_token: int = Field(MAX_NEW_TOKEN, ge=1, le=MAX_NEW_TOKEN)  # extension: at most this many audio tokens
    min_new_token: int = Field(0, ge=0, le=MAX_NEW_TOKEN)  # extension: at least this many (fixed-length clips)
    seed: int | None = None  # extension: fix the sampling seed for reproducible audio


def chattts_speed(speed: float) -> int:
    """OpenAI speed (0.25-4.0, 1.0 normal) -> ChatTTS [speed_N] (0-9, 5 normal) by log2(speed), since speed is a
    ratio: 2.5 levels per halving below 1.0, 2 per doubling above (rounded): 0.25 -> 0, 0.5 -> 3, 1.0 -> 5,
    2.0 -> 7, 4.0 -> 9."""
    octaves = math.log2(min(4.0, max(0.25, speed)))  # -2 .. 2
    level = 5 + octaves * (2.5 if octaves < 0 else 2.0)
    return int(math.floor(level + 0.5))


class SpeechBackend(Protocol):
    """Where the route's requests are synthesized (validated requests in, the library's results and errors out)."""

    api_key: str | None  # "user:pass": the Bearer key the route asks for (None: no key)
    voices_dir: Path  # saved voice cards that `voice` may name

    def config(self) -> str:
        """What requests run on, in words (the X-ChatTTS-Config header)."""

    def served(self) -> dict:
        """What this server runs, for a client that measures it (`GET /v1/audio/voices` says it as "server"):
        "model" (the --model it loaded), "scheduling" (one of synthesis.SCHEDULINGS), "max_batch" (texts generated at
        once: continuous batching's rows, or a request-level batch's texts), "config", "why" (the app's reason for its
        default configuration: the CPU and its kernels, or the sweep that measured it); None where unknown."""

    async def whole(self, req: SynthesisRequest) -> SynthesisOutput:
        """The request's whole result."""

    def stream(self, req: SynthesisRequest, session: str, continues: bool = False,
               ) -> AsyncIterator[StreamChunk | SynthesisOutput]:
        """Each StreamChunk as it is made, then the whole SynthesisOutput. `continues`: a later sentence of a request
        already taken, which a full queue must not refuse (its request was counted when it arrived)."""

    def stop(self, session: str) -> None:
        """Stop that session's stream after the current GPT step (its batch carries on)."""


@dataclass(frozen=True)
class AppSpeech:
    """The app's own synthesis: its batcher, on its serving configuration."""

    ctx: AppContext

    @property
    def api_key(self) -> str | None:
        return self.ctx.policy.auth

    @property
    def voices_dir(self) -> Path:
        return self.ctx.voices_dir

    def config(self) -> str:
        return describe(speech.serving_settings(self.ctx))

    def served(self) -> dict:
        """Continuous batching's rows and queue, or request-level batching's batch and wait: whichever is in use."""
        settings = speech.serving_settings(self.ctx)
        scheduling = speech.scheduling(self.ctx, settings)
        policy = self.ctx.policy
        if scheduling == CONTINUOUS:
            bounds = {"max_batch": policy.max_rows, "max_queue": policy.max_queue}
        else:
            bounds = {"max_batch": policy.max_batch, "max_wait_ms": policy.max_wait_ms}
        return {"model": policy.model, "scheduling": scheduling, **bounds, "config": describe(settings),
                "why": self.ctx.serving.reason if self.ctx.serving else None}

    async def whole(self, req: SynthesisRequest) -> SynthesisOutput:
        out, _ = await speech.serve(self.ctx, speech.serving_settings(self.ctx), req)
        return out

    async def stream(self, req: SynthesisRequest, session: str, continues: bool = False,
                     ) -> AsyncIterator[StreamChunk | SynthesisOutput]:
        async for item in speech.serve_stream(self.ctx, speech.serving_settings(self.ctx), req, session, continues):
            yield item if isinstance(item, StreamChunk) else item[0]

    def stop(self, session: str) -> None:
        speech.RUNNING.interrupt(session)


def speech_router(ctx: AppContext) -> APIRouter:
    """The app's /v1 routes."""
    return openai_router(AppSpeech(ctx))


def openai_router(backend: SpeechBackend) -> APIRouter:
    def require_key(authorization: str | None = Header(None)) -> None:
        # A dependency, so a wrong key is refused before the body is even looked at.
        if not backend.api_key:
            return
        token = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(token.encode(), backend.api_key.encode()):
            raise OpenAIError(401, "missing or wrong API key: send the server's --auth user:pass as a Bearer token",
                              code="invalid_api_key")

    router = APIRouter(route_class=OpenAIErrorsRoute, dependencies=[Depends(require_key)])

    @router.get("/v1/audio/voices")
    def list_voices():
        return {"voices": list(PRESET_VOICES) + saved_card_names(backend.voices_dir),
                "formats": audio_io.available_formats(), "server": backend.served()}

    @router.post("/v1/audio/speech")
    async def create_speech(body: SpeechBody):
        started = time.perf_counter()
        fmt = _response_format(body)
        _check_length(body)
        if body.stream and fmt in audio_io.STREAM_FORMATS:
            return await _streamed(backend, _sentence_request(backend, body), fmt, started)
        return await _whole(backend, _batch_request(backend, body), fmt, started)

    @router.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    def unknown_route(path: str):
        offered = "; ".join(f"{method} {route}" for route, method in ROUTES.items())
        if f"/v1/{path}" in ROUTES:
            raise OpenAIError(405, f"/v1/{path} takes {ROUTES[f'/v1/{path}']} only; this server offers {offered}")
        raise OpenAIError(404, f"no route /v1/{path}; this server offers {offered}", code="unknown_url")

    return router


def _response_format(body: SpeechBody) -> str:
    fmt = body.response_format.lower()
    if fmt not in audio_io.available_formats():
        raise OpenAIError(400, f"response_format {fmt!r} is not available here; use one of "
                               f"{', '.join(audio_io.available_formats())}", "response_format")
    return fmt


def _check_length(body: SpeechBody) -> None:
    if len(body.input) > MAX_INPUT_CHARS:
        raise OpenAIError(400, f"input is {len(body.input):,} characters; at most {MAX_INPUT_CHARS:,}", "input")


def _synthesis_request(backend: SpeechBackend, body: SpeechBody) -> SynthesisRequest:
    """The input split into sentences (unchecked), with the voice resolved and the extensions applied."""
    try:
        card = resolve_voice(body.voice, backend.voices_dir)
    except InvalidRequest as exc:
        raise OpenAIError(400, str(exc), "voice") from None
    sampling = card.sampling if body.seed is None else replace(card.sampling, audio_seed=body.seed)
    return SynthesisRequest.of(split_sentences(body.input) or [body.input], voice=card.voice, sampling=sampling,
                               refine=card.refine, speed=chattts_speed(body.speed),
                               max_new_token=body.max_new_token, min_new_token=body.min_new_token)


def _batch_request(backend: SpeechBackend, body: SpeechBody) -> SynthesisRequest:
    """All sentences in one batch: a whole file is made fastest in one pass."""
    req = _synthesis_request(backend, body)
    if len(req.texts) > MAX_BATCH:  # a streamed response makes them one after another: no such limit
        raise OpenAIError(400, f"input splits into {len(req.texts)} sentences; a whole file makes them in one batch "
                               f"of at most {MAX_BATCH}: send \"stream\": true (pcm, wav or mp3: sentence after "
                               "sentence), or shorter input", "input")
    with as_openai_errors():
        return validate_request(req)


def _sentence_request(backend: SpeechBackend, body: SpeechBody) -> SynthesisRequest:
    """Sentences to stream one after another (so no batch limit); each is checked now, so that a bad one is
    a 400 rather than a stream cut short."""
    req = _synthesis_request(backend, body)
    with as_openai_errors():
        return replace(req, texts=tuple(validate_request(replace(req, texts=(t,))).texts[0] for t in req.texts))


async def _whole(backend: SpeechBackend, req: SynthesisRequest, fmt: str, started: float) -> Response:
    with as_openai_errors():
        out = await backend.whole(req)
        cut_short(out)  # a whole file that is not whole is an error, never a 200
    data = await run_in_threadpool(audio_io.encode, audio_io.join(out.audio), fmt)
    m = out.measurements
    headers = _made_headers(backend, out.synthetic, time.perf_counter() - started, m.queue_wait_s, m.batch_requests,
                            m.scheduling)
    headers["X-ChatTTS-Wall-S"] = f"{m.wall_s:.3f}"
    if m.rtf is not None:
        headers["X-ChatTTS-RTF"] = f"{m.rtf:.3f}"
    return Response(data, media_type=audio_io.media_type(fmt), headers=headers)


def _made_headers(backend: SpeechBackend, synthetic: bool, first_audio_s: float, queue_wait_s: float,
                  batch_requests: int, scheduling: str) -> dict:
    """How this response was made: time to its first audio and in the queue (both seconds since the request
    arrived), how many requests shared its batched generation (continuous: the most rows generating at once
    while it did), which scheduling ran (continuous or request-level batching), and on which configuration."""
    return {"X-ChatTTS-First-Audio-S": f"{first_audio_s:.3f}", "X-ChatTTS-Queue-S": f"{queue_wait_s:.3f}",
            "X-ChatTTS-Batch-Requests": str(batch_requests), "X-ChatTTS-Scheduling": scheduling,
            "X-ChatTTS-Synthetic": str(synthetic).lower(),
            "X-ChatTTS-Config": backend.config().replace(" · ", ", ")}  # headers are ASCII


async def _streamed(backend: SpeechBackend, req: SynthesisRequest, fmt: str, started: float) -> StreamingResponse:
    """Start the response only once the first audio exists: a failure before it is still an HTTP error,
    and the headers can say how long the first audio took."""
    live = LiveSynthesis(backend, req)
    first = await live.next_chunk()
    if first is None:
        raise OpenAIError(500, "the synthesis produced no audio", kind="server_error")
    headers = _made_headers(backend, first.synthetic, time.perf_counter() - started, first.queue_wait_s,
                            first.batch_requests, first.scheduling)
    return LiveResponse(live, _encoded(live, first.audio[0], fmt), media_type=audio_io.media_type(fmt),
                        headers=headers)


async def _encoded(live: "LiveSynthesis", first, fmt: str):
    """The response body. A failure after the first audio (a failed step, out of memory, a stream cut short) is
    raised here, once logged: the server then resets the connection, so the client's read fails (httpx, openai and
    browsers raise) instead of ending like a whole clip."""
    encoder = audio_io.StreamEncoder(fmt)
    yield encoder.header + encoder.encode(first)
    chunks = 1
    try:
        while (chunk := await live.next_chunk()) is not None:
            yield encoder.encode(chunk.audio[0])
            chunks += 1
    except Exception as exc:
        log.error("speech stream: cut after %d chunk(s), the connection is reset: %s", chunks, exc)
        raise
    yield encoder.flush()


def cut_short(out: SynthesisOutput) -> None:
    """Raise when a result is interrupted: its audio ends early, and not because its listener left (callers ask only
    then: a listener who left hears nothing more anyway). A clip cut short must never be answered like a whole one."""
    m = out.measurements
    if m.interrupted:
        raise OpenAIError(503, f"the synthesis was cut short after {sum(m.tokens)} audio tokens "
                               f"({m.interrupted_reason or 'interrupted'}); try again", kind="server_error",
                          code="interrupted")


class LiveResponse(StreamingResponse):
    """A streamed response that stops its synthesis however it ends: a client that hangs up frees its place
    in the batch instead of leaving it generating audio nobody will hear."""

    def __init__(self, live: "LiveSynthesis", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.live = live

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.live.stop()


class LiveSynthesis:
    """One request's sentences synthesized one after another (each in a batch with whatever arrives with it),
    each audio chunk handed to the response as soon as it exists."""

    def __init__(self, backend: SpeechBackend, req: SynthesisRequest):
        self._backend = backend
        self._queue: asyncio.Queue = asyncio.Queue()
        self._session = f"v1-{uuid.uuid4().hex}"  # so stop() interrupts this request's part, no other
        self._stopped = False
        self._task = asyncio.ensure_future(self._run(req))

    async def next_chunk(self) -> StreamChunk | None:
        """The next chunk, or None at the end; a synthesis error is raised here (as an OpenAIError when it is a
        refusal)."""
        item = await self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def stop(self) -> None:
        """Stop after the current GPT step; the rest of its batch carries on."""
        if not self._task.done():
            self._stopped = True
            self._backend.stop(self._session)

    async def _run(self, req: SynthesisRequest) -> None:
        try:
            with as_openai_errors():
                last = None
                for i, text in enumerate(req.texts):
                    if self._stopped:
                        break
                    if last is not None:  # a pause between sentences, labelled like the audio around it
                        self._queue.put_nowait(replace(last, audio=[audio_io.silence(audio_io.SENTENCE_GAP_S)]))
                    last = await self._sentence(replace(req, texts=(text,)), continues=i > 0) or last
        except Exception as exc:  # handed to the response, which answers or aborts with it
            self._queue.put_nowait(exc)
        finally:
            self._queue.put_nowait(None)

    async def _sentence(self, req: SynthesisRequest, continues: bool) -> StreamChunk | None:
        """Streams one sentence; returns its last chunk (None when it made no audio)."""
        last = None
        async for item in self._backend.stream(req, self._session, continues):
            if isinstance(item, StreamChunk):
                self._queue.put_nowait(item)
                last = item
            elif self._stopped:
                out = item
                log.warning("speech stream: the client hung up; synthesis stopped after %d audio tokens",
                            sum(out.measurements.tokens))
            else:
                cut_short(item)  # stopped, but not by this listener: the stream must not end like a whole one
        return last


def install(app, router: APIRouter) -> None:
    """Serve the routes beside a launched Gradio app, ahead of Gradio's own routes."""
    before = len(app.router.routes)
    app.include_router(router)
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[0:0] = added
