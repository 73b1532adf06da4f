"""An OpenAI-compatible speech endpoint served beside the UI: `POST /v1/audio/speech`.

Tools that speak OpenAI's audio API can point their base URL at a LAN-shared ChatTTS Lab. `voice`
resolves to a preset name, `seed:N`, or a voice card saved from the Synthesis tab. `model` is
accepted and ignored (the server runs the one model it was started with). `speed` (0.25-4.0)
maps to ChatTTS's [speed_0..9]. With --auth user:pass, send `Authorization: Bearer user:pass`.
"""

from __future__ import annotations

import hmac
import struct
from typing import Literal

import numpy as np
from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from chattts_lab import InvalidRequest, ModelUnavailable, OutOfMemory, Sampling, SynthesisRequest
from chattts_lab import audio as audio_io
from chattts_lab.metrics import SAMPLE_RATE
from chattts_lab.requests import validate_request
from chattts_lab.synthesis import SynthesisOutput
from chattts_lab.voices import PRESET_VOICES, resolve_voice, saved_card_names, split_sentences
from webui import speech
from webui.context import AppContext
from webui.runtime import default_settings

MAX_INPUT_CHARS = 4096  # OpenAI's own limit for this endpoint
STREAM_FORMATS = ("pcm", "wav")


class SpeechBody(BaseModel):
    model: str = "chattts"
    input: str
    voice: str = "Aria"
    response_format: str = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio"] | None = None  # OpenAI's name for a chunked audio body
    stream: bool = False  # the same, as a plain flag
    max_new_token: int = Field(2048, ge=1, le=2048)  # extension: cap audio tokens (metrics.STEPS_PER_AUDIO_SECOND per s)
    seed: int | None = None  # extension: fix the sampling seed for reproducible audio


def chattts_speed(speed: float) -> int:
    """OpenAI speed (1.0 normal, 0.25-4.0) -> ChatTTS [speed_N] (5 normal, 0-9)."""
    return int(min(9, max(0, round(5 * speed))))


def _error(status: int, message: str, param: str | None = None, code: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": code, "param": param, "code": None}}, status_code=status)


def _authorized(ctx: AppContext, authorization: str | None) -> bool:
    if not ctx.api_key:
        return True
    token = (authorization or "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(token.encode(), ctx.api_key.encode())


def _request(ctx: AppContext, body: SpeechBody) -> SynthesisRequest:
    card = resolve_voice(body.voice, ctx.voices_dir)
    sampling = card.sampling if body.seed is None else Sampling(**{**card.sampling.__dict__, "audio_seed": body.seed})
    texts = split_sentences(body.input) or [body.input]
    return SynthesisRequest.of(texts, voice=card.voice, sampling=sampling, refine=card.refine,
                               speed=chattts_speed(body.speed), max_new_token=body.max_new_token)


def wav_stream_header(sample_rate: int = SAMPLE_RATE) -> bytes:
    """A 16-bit mono WAV header with unknown length (0xFFFFFFFF), as streaming servers send it."""
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
            sample_rate * 2, 2, 16) + b"data" + struct.pack("<I", 0xFFFFFFFF))


def _pcm16(chunk: np.ndarray) -> bytes:
    return (np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes()


def speech_router(ctx: AppContext) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/audio/voices")
    def list_voices(authorization: str | None = Header(None)):
        if not _authorized(ctx, authorization):
            return _error(401, "missing or wrong API key (use the --auth user:pass as a Bearer token)", code="authentication_error")
        return {"voices": list(PRESET_VOICES) + saved_card_names(ctx.voices_dir), "formats": audio_io.available_formats()}

    @router.post("/v1/audio/speech")
    def create_speech(body: SpeechBody, authorization: str | None = Header(None)):
        if not _authorized(ctx, authorization):
            return _error(401, "missing or wrong API key (use the --auth user:pass as a Bearer token)", code="authentication_error")
        fmt = body.response_format.lower()
        if fmt not in audio_io.available_formats():
            return _error(400, f"response_format {fmt!r} is not available here; use one of "
                               f"{', '.join(audio_io.available_formats())}", "response_format")
        if len(body.input) > MAX_INPUT_CHARS:
            return _error(400, f"input is {len(body.input):,} characters; at most {MAX_INPUT_CHARS}", "input")
        streaming = body.stream or body.stream_format == "audio"
        if streaming and fmt not in STREAM_FORMATS:
            return _error(400, f"streaming sends {' or '.join(STREAM_FORMATS)}; {fmt!r} needs the whole audio", "response_format")
        try:
            req = validate_request(_request(ctx, body))
            if streaming:
                return StreamingResponse(_stream(ctx, req, fmt), media_type=audio_io.media_type(fmt))
            out, _ = speech.run(ctx, default_settings(), req)
        except OutOfMemory as exc:  # the server is fine; this request was too big for its memory
            return _error(503, str(exc), code="server_error")
        except (InvalidRequest, ValueError) as exc:
            return _error(400, str(exc), "input" if "text" in str(exc) else "voice")
        except ModelUnavailable as exc:
            return _error(503, str(exc), code="server_error")
        data = audio_io.encode(audio_io.join(out.audio), fmt)
        return Response(data, media_type=audio_io.media_type(fmt), headers=_timing_headers(out))

    return router


def _timing_headers(out: SynthesisOutput) -> dict:
    m = out.measurements
    headers = {"X-ChatTTS-Wall-S": f"{m.wall_s:.3f}", "X-ChatTTS-Synthetic": str(out.synthetic).lower()}
    if m.rtf is not None:
        headers["X-ChatTTS-RTF"] = f"{m.rtf:.3f}"
    return headers


def _stream(ctx: AppContext, req: SynthesisRequest, fmt: str):
    from dataclasses import replace

    from chattts_lab.synthesis import StreamChunk

    if fmt == "wav":
        yield wav_stream_header()
    for text in req.texts:  # sentences one after another, so the audio follows the text
        for _, item in speech.run_stream(ctx, default_settings(), replace(req, texts=(text,))):
            if isinstance(item, StreamChunk):
                yield _pcm16(item.audio[0])


def install(app, router: APIRouter) -> None:
    """Serve the routes beside a launched Gradio app, ahead of Gradio's own routes."""
    before = len(app.router.routes)
    app.include_router(router)
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[0:0] = added
