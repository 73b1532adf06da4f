"""Per-stage clocks around one ChatTTS call, without changing what ChatTTS computes.

ChatTTS exposes no timings, so `StageRecorder` wraps a few of a loaded `Chat`'s bound methods for the
duration of one call (instance attributes only; the class is untouched) and attributes wall time to
stages: text refine, GPT prefill, GPT decode, decoder (DVAE) and vocoder (Vocos). Whatever is left
(text normalisation, tokenisation, Python glue) is 'other', so the stages always sum to the wall time.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from chattts_lab.trackers.measure import Stopwatch

STAGES = ("refine_s", "prefill_s", "decode_s", "decoder_s", "vocoder_s")


@dataclass
class StageTimes:
    refine_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    decoder_s: float = 0.0
    vocoder_s: float = 0.0
    other_s: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


_MISSING = object()


@dataclass
class StageRecorder:
    clock: Stopwatch
    times: StageTimes = field(default_factory=StageTimes)
    forward_calls: int = 0  # GPT forward passes while generating audio tokens (1 prefill + decode steps)
    decoded: list = field(default_factory=list)  # (token lengths, wav array) per decode call
    _in_code_generation: bool = False
    _generation_t0: float | None = None  # start of a code generation whose prefill is still running
    _prefill_end: float | None = None
    on_step: Callable[[], object] | None = None  # called after every GPT forward pass (a stop request's check)

    def gpt_forward_done(self) -> None:
        """Engines call this after each GPT forward pass; the first one of a generation ends prefill."""
        if self.on_step is not None:
            self.on_step()
        if not self._in_code_generation:
            return  # a refine-text pass: timed as a whole by _refine_text
        self.forward_calls += 1
        if self._generation_t0 is not None:
            self._prefill_end = self.clock.now()
            self.times.prefill_s += self._prefill_end - self._generation_t0
            self._generation_t0 = None

    def audio_done(self, lengths: list[int], wavs) -> None:
        """An engine that decodes in pieces (lab streaming) reports the whole audio of the call here."""
        self.decoded.append((list(lengths), np.asarray(wavs)))

    def _wrap_generate(self, generate):
        recorder = self

        def timed_generate(*args, **kwargs):
            if kwargs.get("infer_text"):
                yield from generate(*args, **kwargs)
                return
            inner = generate(*args, **kwargs)
            recorder._generation_t0 = recorder._prefill_end = None
            first = True
            while True:
                t0 = recorder.clock.now()
                if first:
                    recorder._generation_t0, first = t0, False
                recorder._in_code_generation = True
                try:
                    item = next(inner)
                except StopIteration:
                    return
                finally:
                    recorder._in_code_generation = False
                    recorder._account_slice(t0, recorder.clock.now())
                yield item

        return timed_generate

    def _account_slice(self, t0: float, t1: float) -> None:
        """Time inside the token generator that is not prefill is decode (sampling included)."""
        if self._generation_t0 is not None:
            return  # no forward pass reported yet: the whole slice is still prefill, counted at its end
        decode_from = self._prefill_end if self._prefill_end is not None and self._prefill_end >= t0 else t0
        self.times.decode_s += t1 - decode_from

    @contextmanager
    def timed(self, stage: str):
        """Add the time spent inside to `stage` (one of STAGES)."""
        t0 = self.clock.now()
        try:
            yield
        finally:
            setattr(self.times, stage, getattr(self.times, stage) + self.clock.now() - t0)

    def _wrap_timed(self, fn, stage: str):
        recorder = self

        def timed(*args, **kwargs):
            with recorder.timed(stage):
                return fn(*args, **kwargs)

        return timed

    def _wrap_decode_to_wavs(self, fn):
        recorder = self

        def timed(result_list, use_decoder):
            lengths = [int(r.size(0)) for r in result_list]
            t0 = recorder.clock.now()
            vocoder_before = recorder.times.vocoder_s
            wavs = fn(result_list, use_decoder)
            spent = recorder.clock.now() - t0
            recorder.times.decoder_s += spent - (recorder.times.vocoder_s - vocoder_before)
            recorder.decoded.append((lengths, np.asarray(wavs)))
            return wavs

        return timed

    @contextmanager
    def attached(self, chat, engine):
        """Wrap the Chat's methods for the duration of one call, then restore them exactly; `engine` (the
        model's EngineRuntime) reports its GPT forward passes."""
        wrappers = [
            (chat.gpt, "generate", self._wrap_generate(chat.gpt.generate)),
            (chat, "_refine_text", self._wrap_timed(chat._refine_text, "refine_s")),
            (chat, "_vocos_decode", self._wrap_timed(chat._vocos_decode, "vocoder_s")),
            (chat, "_decode_to_wavs", self._wrap_decode_to_wavs(chat._decode_to_wavs)),
        ]
        saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in wrappers]
        for owner, name, wrapper in wrappers:
            owner.__dict__[name] = wrapper
        try:
            with engine.reporting_steps_to(self):
                yield self
        finally:
            for owner, name, value in saved:
                if value is _MISSING:
                    owner.__dict__.pop(name, None)
                else:
                    owner.__dict__[name] = value

    def finish(self, wall_s: float) -> StageTimes:
        measured = sum(getattr(self.times, s) for s in STAGES)
        self.times.other_s = max(0.0, wall_s - measured)
        return self.times
