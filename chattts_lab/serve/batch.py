"""Several requests as one batched generation: merged, run once, split back into one result per request.

A batch shares what ChatTTS applies to all of its rows at once: the sampling settings, the speed prompt, the
refine pass, the token limits, and the kind of voice (`shared_settings`). Voices given as a seed or a speaker
string may differ: each row gets its own embedding. Each request keeps its own texts, its own audio and
measurements, its own stream and its own stop: an interrupted request's audio ends where it asked to stop while
the others carry on, and the generation stops early only once every request has asked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from chattts_lab import metrics
from chattts_lab.models import LoadedModel
from chattts_lab.requests import SynthesisRequest, Voice
from chattts_lab.synthesis import (SAMPLE_RATE, STOPPED_BY_CALLER, StreamChunk, SynthesisOutput, speaker_from_seed,
                                   synthesize, synthesize_stream)


@dataclass
class Part:
    """One (validated) request inside a batch."""

    request: SynthesisRequest
    stop: threading.Event
    on_chunk: Callable[[StreamChunk], None] | None = None  # this request's new audio, when the batch streams
    queue_wait_s: float = 0.0  # set by the server when the batch starts
    on_start: Callable[[], None] | None = None  # continuous batching: called once, when its first row is admitted
    # a later sentence of a request already taken (streamed sentence after sentence): it was counted against the
    # queue bound when its request arrived, so it is never refused for it (a refusal mid-stream would cut the clip)
    continues: bool = False

    @property
    def rows(self) -> int:
        return len(self.request.texts)


def shared_settings(request: SynthesisRequest) -> tuple:
    """What requests must agree on to share one batched generation."""
    return (_voice_kind(request.voice), request.sampling, request.refine, request.speed, request.max_new_token,
            request.min_new_token, request.normalize_text)


def _voice_kind(voice: Voice):
    """Voices that are an embedding (a seed or a speaker string) share a batch, each row its own. A sample-audio
    voice (a prompt for the whole batch) and the random voice share one only with the same voice."""
    return "embedding" if voice.seed is not None or voice.speaker is not None else voice


def _row_speakers(model: LoadedModel, parts: list[Part]) -> tuple[str, ...] | None:
    """Each text's speaker string when the parts' voices differ (None when every row has the same voice)."""
    voices = [p.request.voice for p in parts]
    if len(set(voices)) == 1 or _voice_kind(voices[0]) != "embedding":
        return None
    speakers = {v: v.speaker or speaker_from_seed(model, v.seed) for v in set(voices)}
    return tuple(speakers[p.request.voice] for p in parts for _ in p.request.texts)


def synthesize_parts(model: LoadedModel, parts: list[Part], stream: bool = False) -> list[SynthesisOutput]:
    """Run the parts (which share `shared_settings`) as one generation; one SynthesisOutput per part, in order."""
    if len({shared_settings(p.request) for p in parts}) > 1:
        raise ValueError("these requests cannot share a batch: their sampling, speed, limits or kind of voice differ")
    merged = replace(parts[0].request, texts=tuple(t for p in parts for t in p.request.texts))
    stop, spans, speakers = _EveryPartStopped(parts), _spans(parts), _row_speakers(model, parts)
    if not stream:  # each part was validated on its own
        out = synthesize(model, merged, stop=stop, checked=True, row_speakers=speakers)
        return [_part_output(out, parts, i, spans[i], stop.asked_at.get(i), out.measurements.ttfa_s)
                for i in range(len(parts))]
    first_audio: dict[int, float] = {}
    for item in synthesize_stream(model, merged, stop=stop, checked=True, row_speakers=speakers):
        if isinstance(item, SynthesisOutput):
            return [_part_output(item, parts, i, spans[i], stop.asked_at.get(i), first_audio.get(i))
                    for i in range(len(parts))]
        _hand_out(item, parts, spans, first_audio)
    raise RuntimeError("the stream ended without its final result")


class _EveryPartStopped:
    """The batch's stop event: set once every part has asked to stop.

    synthesize checks it once per GPT step, so counting the checks counts the steps: a part that asks
    earlier is noted with the step it asked at, and its audio is cut there afterwards."""

    def __init__(self, parts: list[Part]):
        self.parts, self.steps, self.asked_at = parts, 0, {}

    def is_set(self) -> bool:
        self.steps += 1
        for i, part in enumerate(self.parts):
            if part.stop.is_set():
                self.asked_at.setdefault(i, self.steps)
        return len(self.asked_at) == len(self.parts)


def _spans(parts: list[Part]) -> list[tuple[int, int]]:
    spans, start = [], 0
    for part in parts:
        spans.append((start, start + part.rows))
        start += part.rows
    return spans


def _hand_out(chunk: StreamChunk, parts: list[Part], spans, first_audio: dict[int, float]) -> None:
    """Give each streaming part the new samples of its own texts (none once it has asked to stop)."""
    for i, (part, (a, b)) in enumerate(zip(parts, spans)):
        audio = chunk.audio[a:b]
        if part.on_chunk is None or part.stop.is_set() or not any(w.size for w in audio):
            continue
        first_audio.setdefault(i, chunk.elapsed_s)
        part.on_chunk(replace(chunk, audio=audio, queue_wait_s=part.queue_wait_s, batch_requests=len(parts)))


def _part_output(out: SynthesisOutput, parts: list[Part], i: int, span: tuple[int, int], asked_at: int | None,
                 ttfa_s: float | None) -> SynthesisOutput:
    a, b = span
    m = out.measurements
    tokens, audio = list(m.tokens[a:b]), list(out.audio[a:b])
    if asked_at is not None:  # its generation ended at that step, however long the others ran
        tokens = [min(n, asked_at) for n in tokens]
        audio = [w[: metrics.samples_for_tokens(n)] for w, n in zip(audio, tokens)]
    measurements = replace(
        m, tokens=tokens, audio_s=[len(w) / SAMPLE_RATE for w in audio], ttfa_s=ttfa_s,
        interrupted=m.interrupted or asked_at is not None,
        interrupted_reason=STOPPED_BY_CALLER if asked_at is not None else m.interrupted_reason,
        queue_wait_s=parts[i].queue_wait_s, batch_requests=len(parts))
    return replace(out, audio=[np.asarray(w, dtype=np.float32) for w in audio], measurements=measurements,
                   texts=out.texts[a:b])
