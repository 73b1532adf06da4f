"""The one path from a UI or HTTP request to the library: load (cached), lock, synthesize, write audio.

Every caller (the Generate button, the `/synthesize` API, the OpenAI-compatible route) goes through
here, so they all share the model lock and the same voice resolution.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from chattts_lab import LoadedModel, SynthesisRequest, load_model, synthesize, synthesize_stream
from chattts_lab.synthesis import encode_sample_audio, speaker_from_seed, warm_up
from chattts_lab.voices import VoiceCard
from webui.context import AppContext
from webui.runtime import RuntimeSettings
from webui.security import read_audio_upload

log = logging.getLogger(__name__)


@dataclass
class Running:
    """Which session's synthesis holds the model now, so Interrupt only ever stops your own."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _by_session: dict = field(default_factory=dict)

    @contextmanager
    def mark(self, session: str | None):
        """Yields the stop event of this session's synthesis (pass it to synthesize)."""
        stop = threading.Event()
        with self._lock:
            self._by_session[session] = stop
        try:
            yield stop
        finally:
            with self._lock:
                self._by_session.pop(session, None)

    def interrupt(self, session: str | None) -> bool:
        with self._lock:
            stop = self._by_session.get(session)
        if stop is None:
            return False
        stop.set()
        return True


RUNNING = Running()


def get_model(ctx: AppContext, settings: RuntimeSettings, progress=None) -> LoadedModel:
    """The model for these settings, loading it on first use (cached by the library) and warming it up
    once, so the first result a person sees is not inflated by one-time JIT costs."""
    if progress is not None:
        progress(0.05, desc=f"Loading model ({ctx.model}, {settings.device}, {settings.precision})…")
    model = load_model(settings.load_config(ctx.model))
    if not getattr(model, "webui_warmed", False):  # once per loaded model
        if progress is not None:
            progress(0.2, desc="Warming up (one-time compilation)…")
        warm_up(model)
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


def run(ctx: AppContext, settings: RuntimeSettings, request: SynthesisRequest, session: str | None = None, progress=None):
    with ctx.model_work:  # loading and synthesis raise chattts_lab.OutOfMemory, a message for the user
        model = get_model(ctx, settings, progress)
        if progress is not None:
            progress(0.3, desc="Synthesizing…")
        with RUNNING.mark(session) as stop:
            return synthesize(model, request, stop=stop), model


def run_stream(ctx: AppContext, settings: RuntimeSettings, request: SynthesisRequest, session: str | None = None,
               progress=None):
    """Yields (model, item) for each StreamChunk and the final SynthesisOutput."""
    with ctx.model_work:  # loading and synthesis raise chattts_lab.OutOfMemory, a message for the user
        model = get_model(ctx, settings, progress)
        with RUNNING.mark(session) as stop:
            for item in synthesize_stream(model, request, stop=stop):
                yield model, item
