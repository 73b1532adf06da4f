"""Audio-quality measures that run offline from models shipped inside their PyPI wheels.

Each measure is a small module that loads its model once per process (cached) and names the model and version that
made its figure (`model_info()`), so every number in the history says where it came from:

    dnsmos     predicted MOS, non-intrusive (DNSMOS P.835 and P.808, ONNX, through `speechmos`)
    wer        English word error rate of a known sentence (`pocketsphinx` en-us recogniser, `jiwer`)
    speaker    speaker similarity to a reference clip (`resemblyzer` speaker encoder)
    intrusive  log-mel distance and STOI to a reference waveform of the same length (`pystoi`)

`measures.score_clip` runs them all on one clip; `chattts_lab.quality.sweep` makes and scores a sweep's clips.
All take mono float audio at 16 kHz (`to_16k` converts), the rate the models were trained on.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import numpy as np

RATE = 16_000
NOT_MEANINGFUL = "not meaningful on synthetic weights"
# A sweep cell's quality columns (chattts_lab.quality.sweep): its configuration's mean over the clips, the change
# from the reference (stock fp32 on the same device) on the same clips, and what made them.
FIGURE_COLUMNS = {"quality_mos": "dnsmos_ovrl", "quality_p808": "dnsmos_p808", "quality_wer_pct": "wer",
                  "quality_speaker_sim": "speaker_sim", "quality_mel_db": "mel_distance_db", "quality_stoi": "stoi"}
DELTA_COLUMNS = {"quality_mos_delta": "quality_mos", "quality_wer_delta_pts": "quality_wer_pct"}
QUALITY_TEXT_COLUMNS = ("quality_note", "quality_models")
QUALITY_COLUMNS = (*FIGURE_COLUMNS, *DELTA_COLUMNS, "quality_clips", *QUALITY_TEXT_COLUMNS)


def to_16k(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Mono float32 at 16 kHz, clipped to [-1, 1] (the models' input)."""
    from math import gcd

    from scipy.signal import resample_poly

    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    if sample_rate != RATE:
        g = gcd(RATE, int(sample_rate))
        audio = resample_poly(audio, RATE // g, int(sample_rate) // g).astype(np.float32)
    return np.clip(audio, -1.0, 1.0)


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"
