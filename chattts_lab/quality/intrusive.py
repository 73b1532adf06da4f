"""Intrusive distances to a reference waveform: meaningful only where the audio tokens are the same (a decoder or
vocoder precision, streaming against whole), so the two clips line up sample for sample. Clips whose lengths
differ (other tokens) get None rather than a distance between misaligned audio.

PESQ is left out: `pesq` has no wheel (it builds from source); STOI (`pystoi`, pure Python) stands beside the
log-mel distance.
"""

from __future__ import annotations

import functools

import numpy as np

from chattts_lab.quality import RATE, package_version

LENGTH_TOLERANCE = 0.01  # clips whose lengths differ by more are not the same tokens
MEL_FLOOR = 1e-5  # amplitude floor of the log-mel spectra (-100 dB): silence does not dominate the distance


def model_info() -> str:
    return f"log-mel distance (torchaudio, 80 mels), STOI (pystoi {package_version('pystoi')})"


def aligned(reference: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Both cut to the shorter length, or None when their lengths say they are not the same tokens."""
    n, m = len(reference), len(candidate)
    if not n or not m or abs(n - m) > LENGTH_TOLERANCE * max(n, m):
        return None
    k = min(n, m)
    return np.asarray(reference[:k], dtype=np.float32), np.asarray(candidate[:k], dtype=np.float32)


@functools.lru_cache(maxsize=1)
def _mel():
    import torchaudio

    return torchaudio.transforms.MelSpectrogram(sample_rate=RATE, n_fft=1024, hop_length=256, n_mels=80)


def log_mel_distance(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """RMS difference of the two log-mel spectrograms in dB (0: identical); None where they do not line up."""
    import torch

    pair = aligned(reference, candidate)
    if pair is None:
        return None
    ref, cand = (10 * torch.log10(_mel()(torch.from_numpy(x)).clamp_min(MEL_FLOOR ** 2)) for x in pair)
    return float(torch.sqrt(torch.mean((ref - cand) ** 2)))


def stoi(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Short-time objective intelligibility of the candidate against the reference (0-1, higher is better)."""
    from pystoi import stoi as pystoi_stoi

    pair = aligned(reference, candidate)
    return float(pystoi_stoi(pair[0], pair[1], RATE, extended=False)) if pair is not None else None
