"""Audio out: join per-sentence audio and encode it as files or bytes (soundfile, no ffmpeg needed)."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import numpy as np
import soundfile as sf

from chattts_lab.metrics import SAMPLE_RATE

# response_format -> (soundfile format, subtype, media type); raw PCM is 16-bit little-endian mono.
FORMATS = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "mp3": ("MP3", None, "audio/mpeg"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "pcm": ("RAW", "PCM_16", "audio/pcm"),
}


def available_formats() -> list[str]:
    """The formats this machine's libsndfile can write (mp3 needs libsndfile >= 1.1)."""
    have = sf.available_formats()
    return [name for name, (fmt, _, _) in FORMATS.items() if fmt in have]


def join(parts: list[np.ndarray], sample_rate: int = SAMPLE_RATE, gap_s: float = 0.15) -> np.ndarray:
    """Concatenate sentences with a short silence between them."""
    parts = [np.asarray(p, dtype=np.float32) for p in parts if len(p)]
    if not parts:
        return np.zeros(0, dtype=np.float32)
    gap = np.zeros(int(gap_s * sample_rate), dtype=np.float32)
    out = [parts[0]]
    for p in parts[1:]:
        out += [gap, p]
    return np.concatenate(out)


def encode(audio: np.ndarray, fmt: str = "wav", sample_rate: int = SAMPLE_RATE) -> bytes:
    """Encode mono float audio in [-1, 1] as bytes of the given response format."""
    if fmt not in FORMATS or fmt not in available_formats():
        raise ValueError(f"unsupported audio format {fmt!r}; available here: {', '.join(available_formats())}")
    sf_format, subtype, _ = FORMATS[fmt]
    buf = io.BytesIO()
    data = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    if data.size == 0:
        data = np.zeros(1, dtype=np.float32)  # encoders refuse empty files; one silent sample instead
    kwargs = {"endian": "LITTLE"} if sf_format == "RAW" else {}
    sf.write(buf, data, sample_rate, format=sf_format, subtype=subtype, **kwargs)
    return buf.getvalue()


def media_type(fmt: str) -> str:
    return FORMATS[fmt][2]


def write_wav(audio: np.ndarray, folder: Path, stem: str = "chattts", sample_rate: int = SAMPLE_RATE) -> Path:
    """Write a 16-bit WAV with a unique name and return its path (keeps amplitudes as they are)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{uuid.uuid4().hex[:10]}.wav"
    sf.write(path, np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0), sample_rate, subtype="PCM_16")
    return path
