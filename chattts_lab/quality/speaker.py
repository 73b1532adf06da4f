"""Speaker similarity: cosine between `resemblyzer` speaker embeddings (its GE2E encoder ships inside the wheel;
`preprocess_wav` trims long silences with webrtcvad). Same voice and text: near 1; another voice: far lower."""

from __future__ import annotations

import functools

import numpy as np

from chattts_lab.quality import RATE, package_version


@functools.lru_cache(maxsize=1)
def load():
    from resemblyzer import VoiceEncoder

    return VoiceEncoder("cpu", verbose=False)


def model_info() -> str:
    return f"resemblyzer {package_version('resemblyzer')} GE2E speaker encoder (cosine)"


def embed(audio: np.ndarray) -> np.ndarray:
    """The unit-length speaker embedding of 16 kHz audio."""
    from resemblyzer import preprocess_wav

    wav = preprocess_wav(np.asarray(audio, dtype=np.float32), source_sr=RATE)
    if not wav.size:
        raise ValueError("the clip holds no voiced audio")
    return load().embed_utterance(wav)


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two embeddings (1: the same voice as far as the encoder can tell)."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
