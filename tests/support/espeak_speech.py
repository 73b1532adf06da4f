"""Real speech made on this machine with Debian espeak-ng, and the same speech degraded, for the quality tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import butter, sosfilt

from chattts_lab.quality import RATE, to_16k

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it takes a short rest."
OTHER_SENTENCE = "She sells sea shells by the sea shore while the sun sets slowly over the water."
VOICE, OTHER_VOICE = "en-us", "en-us+f3"  # espeak-ng's American English voice and its female variant

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                  reason="Debian espeak-ng is not installed (./run tests installs it)")


def speak(text: str, voice: str = VOICE) -> np.ndarray:
    """espeak-ng's rendering of `text`, mono float32 at 16 kHz."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
        audio, rate = sf.read(str(path), dtype="float32")
    return to_16k(audio, rate)


def with_noise(audio: np.ndarray, snr_db: float = 5.0, seed: int = 0) -> np.ndarray:
    """White noise at `snr_db` below the speech's power."""
    noise = np.random.default_rng(seed).standard_normal(len(audio)).astype(np.float32)
    scale = np.sqrt(np.mean(audio ** 2) / np.mean(noise ** 2) / 10 ** (snr_db / 10))
    return np.clip(audio + scale * noise, -1, 1).astype(np.float32)


def low_passed(audio: np.ndarray, cutoff_hz: float = 1000.0) -> np.ndarray:
    return sosfilt(butter(8, cutoff_hz, fs=RATE, output="sos"), audio).astype(np.float32)


def quantized(audio: np.ndarray, levels: int = 8) -> np.ndarray:
    """Coarse quantisation: `levels` steps per unit of amplitude (3 bits), the sound of too few bits."""
    return (np.round(audio * levels) / levels).astype(np.float32)
