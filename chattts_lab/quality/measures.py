"""Every measure on one clip, each figure with the CPU seconds it took, and the models that made them."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from chattts_lab.quality import dnsmos, intrusive, speaker, wer

# The figures a scored clip carries, and for each whether higher is better (what "degraded" means for it).
HIGHER_IS_BETTER = {"dnsmos_ovrl": True, "dnsmos_sig": True, "dnsmos_bak": True, "dnsmos_p808": True,
                    "wer": False, "speaker_sim": True, "mel_distance_db": False, "stoi": True}


def models() -> dict:
    """Which model and version made each kind of figure (kept beside every figure in the history)."""
    return {"mos": dnsmos.model_info(), "wer": wer.model_info(), "speaker": speaker.model_info(),
            "intrusive": intrusive.model_info()}


def load_all() -> float:
    """Load every model now (each once per process); returns the wall seconds it took."""
    t0 = time.perf_counter()
    dnsmos.load(), wer.load(), speaker.load(), intrusive._mel()
    return time.perf_counter() - t0


@dataclass
class Reference:
    """What a clip is compared with: the reference configuration's clip of the same text, voice and seed."""

    audio: np.ndarray  # 16 kHz
    embedding: np.ndarray | None  # None: the encoder found no voice in it (no similarity can be given)

    @staticmethod
    def of(audio: np.ndarray) -> "Reference":
        try:
            return Reference(audio, speaker.embed(audio))
        except ValueError:
            return Reference(audio, None)


def score_clip(audio: np.ndarray, text: str, reference: Reference | None = None) -> dict:
    """Every figure of one 16 kHz clip of `text` (against `reference` where given), `transcript`, `cpu_s`: the CPU
    seconds of each measure (all threads of this process), and `errors`: why a measure gave no figure (a clip too
    short or without voice for it), so one measure that cannot judge a clip leaves the others' figures."""
    out: dict = {}
    cpu: dict = {}
    errors: dict = {}

    def timed(name: str, fn):
        t0 = time.process_time()
        try:
            return fn()
        except ValueError as exc:
            errors[name] = str(exc)
            return None
        finally:
            cpu[name] = round(time.process_time() - t0, 3)

    out.update(timed("dnsmos", lambda: dnsmos.score(audio)) or {})
    out["transcript"] = timed("wer", lambda: wer.transcribe(audio))
    out["wer"] = wer.word_error_rate(text, out["transcript"]) if out["transcript"] is not None else None
    embedding = timed("speaker", lambda: speaker.embed(audio))
    if reference is not None:
        out["speaker_sim"] = speaker.similarity(reference.embedding, embedding) if (
            embedding is not None and reference.embedding is not None) else None
        out["mel_distance_db"] = timed("mel", lambda: intrusive.log_mel_distance(reference.audio, audio))
        out["stoi"] = timed("stoi", lambda: intrusive.stoi(reference.audio, audio))
    return {**out, "cpu_s": cpu, "errors": errors}
