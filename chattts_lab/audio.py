"""Audio out: join per-sentence audio and encode it as whole files (soundfile) or as a stream of bytes
while it is generated (raw PCM, WAV with an open-ended header, MP3 through LAME); no ffmpeg needed."""

from __future__ import annotations

import io
import struct
import uuid
from pathlib import Path

import lameenc
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
STREAM_FORMATS = ("pcm", "wav", "mp3")  # flac's encoder writes its lengths into the header at the end
SENTENCE_GAP_S = 0.15
MP3_KBPS = 64  # plenty for 24 kHz mono speech


def available_formats() -> list[str]:
    """The formats this machine's libsndfile can write (mp3 needs libsndfile >= 1.1)."""
    have = sf.available_formats()
    return [name for name, (fmt, _, _) in FORMATS.items() if fmt in have]


def silence(seconds: float, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    return np.zeros(int(seconds * sample_rate), dtype=np.float32)


def join(parts: list[np.ndarray], sample_rate: int = SAMPLE_RATE, gap_s: float = SENTENCE_GAP_S) -> np.ndarray:
    """Concatenate sentences with a short silence between them."""
    parts = [np.asarray(p, dtype=np.float32) for p in parts if len(p)]
    if not parts:
        return np.zeros(0, dtype=np.float32)
    gap = silence(gap_s, sample_rate)
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


def pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as 16-bit little-endian samples."""
    return (np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2").tobytes()


def wav_stream_header(sample_rate: int = SAMPLE_RATE) -> bytes:
    """A 16-bit mono WAV header whose lengths say "unknown" (0xFFFFFFFF), as streaming servers send it:
    readers take the data to run to the end of the file."""
    unknown = struct.pack("<I", 0xFFFFFFFF)
    fmt_chunk = struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return b"RIFF" + unknown + b"WAVEfmt " + fmt_chunk + b"data" + unknown


class StreamEncoder:
    """Encodes audio chunk by chunk, for a response sent while the audio is still being generated.

    pcm is raw 16-bit samples; wav is the same behind `wav_stream_header`; mp3 goes through LAME
    (lameenc) frame by frame. A streamed mp3 cannot carry LAME's gapless-playback tag (it needs the
    total length up front), so decoders keep the codec's start delay and end padding: it decodes up
    to 1,681 samples (70 ms at 24 kHz) longer than the audio.
    """

    def __init__(self, fmt: str, sample_rate: int = SAMPLE_RATE):
        if fmt not in STREAM_FORMATS:
            raise ValueError(f"{fmt!r} cannot be streamed; streamable formats: {', '.join(STREAM_FORMATS)}")
        self.header = wav_stream_header(sample_rate) if fmt == "wav" else b""
        self._mp3 = _lame(sample_rate) if fmt == "mp3" else None

    def encode(self, chunk: np.ndarray) -> bytes:
        samples = pcm16(chunk)
        return bytes(self._mp3.encode(samples)) if self._mp3 else samples

    def flush(self) -> bytes:
        """The encoder's last buffered frames, once the audio is complete."""
        return bytes(self._mp3.flush()) if self._mp3 else b""


def _lame(sample_rate: int) -> lameenc.Encoder:
    encoder = lameenc.Encoder()
    encoder.set_in_sample_rate(sample_rate)
    encoder.set_channels(1)
    encoder.set_bit_rate(MP3_KBPS)
    encoder.set_quality(2)  # LAME's "near best" psychoacoustics; encoding costs little next to the model
    return encoder


def media_type(fmt: str) -> str:
    return FORMATS[fmt][2]


def write_wav(audio: np.ndarray, folder: Path, stem: str = "chattts", sample_rate: int = SAMPLE_RATE) -> Path:
    """Write a 16-bit WAV with a unique name and return its path (keeps amplitudes as they are)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{uuid.uuid4().hex[:10]}.wav"
    sf.write(path, np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0), sample_rate, subtype="PCM_16")
    return path
