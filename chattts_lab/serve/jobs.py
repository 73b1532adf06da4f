"""A request inside the continuous-batching loop (chattts_lab/serve/scheduler.py): its texts still waiting for a
row, the decoder rows its texts generate in, the audio sent so far, and the answer its caller gets at the end."""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import psutil

from chattts_lab.models import LoadedModel
from chattts_lab.requests import CONTINUOUS
from chattts_lab.serve.batch import Part
from chattts_lab.synthesis import SAMPLE_RATE, STOPPED_BY_CALLER, Measurements, SynthesisOutput
from chattts_lab.trackers.stages import StageTimes


@dataclass(eq=False)
class Job:
    part: Part
    future: Future
    enqueued: float = field(default_factory=time.perf_counter)
    admitted: float | None = None  # when its first text took a row (its prefill began)
    texts: list = field(default_factory=list)  # (index, text) not yet admitted
    rows: dict = field(default_factory=dict)  # text index -> its decoder row (being prefilled, generating and after)
    audio: dict = field(default_factory=dict)  # text index -> list of sent chunks (streamed) or the whole clip
    first_audio_s: float | None = None
    decode_s: float = 0.0
    shared_with: int = 1  # the most rows generating together while this request was
    chunks: int = 0

    @property
    def stream(self) -> bool:
        return self.part.on_chunk is not None

    def done(self) -> bool:
        return not self.texts and all(r.ended for r in self.rows.values())


def job_output(model: LoadedModel, job: Job, audio: list[np.ndarray], max_rows: int) -> SynthesisOutput:
    """The request's answer: each text's audio and what its generation measured."""
    rows = [job.rows.get(i) for i in range(len(audio))]
    wall = time.perf_counter() - (job.admitted or job.enqueued)
    prefill = sum(r.prefill_s for r in rows if r)
    stages = StageTimes(prefill_s=prefill, decode_s=max(0.0, wall - prefill - job.decode_s),
                        decoder_s=job.decode_s)  # decoder_s: decoder and vocoder together
    m = Measurements(
        wall_s=wall, stages=stages, tokens=[r.generated if r else 0 for r in rows],
        gpt_steps=sum(r.steps for r in rows if r), audio_s=[len(a) / SAMPLE_RATE for a in audio],
        peak_rss_mb=psutil.Process().memory_info().rss / 2**20, peak_device_mb=None,
        effective=dict(model.effective, scheduling=CONTINUOUS, rows=max_rows),
        ttfa_s=job.first_audio_s, interrupted=job.part.stop.is_set() or any(r is None for r in rows),
        interrupted_reason=STOPPED_BY_CALLER if job.part.stop.is_set() else (
            "some of its texts were never generated" if any(r is None for r in rows) else None),
        queue_wait_s=job.part.queue_wait_s, batch_requests=job.shared_with, scheduling=CONTINUOUS)
    return SynthesisOutput(audio, m, model.synthetic, texts=job.part.request.texts)
