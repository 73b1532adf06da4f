"""English word error rate of a known sentence: the `pocketsphinx` recogniser (its en-us acoustic model, language
model and CMU dictionary ship inside the wheel) and `jiwer`.

It recognises natural English; synthetic voices (espeak-ng) come out badly even when clean, so compare a
configuration's WER with the reference's on the same texts rather than reading it alone.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from chattts_lab.quality import package_version

_NOT_WORD = re.compile(r"[^a-z0-9' ]+")


@functools.lru_cache(maxsize=1)
def load():
    from pocketsphinx import Decoder

    return Decoder(logfn="/dev/null")  # default config: the en-us model inside the wheel


def model_info() -> str:
    return (f"pocketsphinx {package_version('pocketsphinx')} en-us (default model), "
            f"jiwer {package_version('jiwer')} WER")


def normalise(text: str) -> str:
    """Lower case, words only: punctuation and spacing are not recognition errors."""
    return " ".join(_NOT_WORD.sub(" ", text.lower().replace("-", " ")).split())


def transcribe(audio: np.ndarray) -> str:
    """What the recogniser hears in 16 kHz audio ('' when it hears nothing)."""
    pcm = (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767).astype(np.int16).tobytes()
    decoder = load()
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word errors over reference words (0 is perfect; nothing heard is 1; insertions can take it past 1)."""
    import jiwer

    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        raise ValueError("the reference text has no words")
    return float(jiwer.wer(ref, hyp)) if hyp else 1.0
