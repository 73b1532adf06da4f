"""What the app accepts from people it is shared with: upload size, type and duration limits.

Gradio enforces the size limit on every upload (`launch(max_file_size=...)`, HTTP 413 above it);
the handlers check type and duration here before anything is decoded in full, so a file that is not
audio, is corrupt or lasts hours gets a clear message and costs the server nothing. Uploaded voice
cards and result bundles are parsed strictly as JSON data elsewhere (chattts_lab.voices, .store):
nothing a user sends is ever unpickled or passed to torch.load.
"""

from __future__ import annotations

from pathlib import Path

from chattts_lab.requests import InvalidRequest

MAX_UPLOAD = "10mb"  # Gradio's launch(max_file_size=...): a 60 s WAV clip at 48 kHz stereo is 11 MB; mp3/flac far less
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_SAMPLE_SECONDS = 60.0  # a voice sample needs a few seconds; ChatTTS encodes the whole clip at once
MIN_SAMPLE_SECONDS = 0.25


class InvalidUpload(InvalidRequest):
    """An uploaded file that cannot be used; the message says why."""


def check_audio_upload(path: str | Path, max_seconds: float = MAX_SAMPLE_SECONDS) -> float:
    """Check an uploaded voice clip without decoding it in full; returns its duration in seconds."""
    import soundfile as sf

    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidUpload("the uploaded clip is missing (upload it again)") from exc
    if size > MAX_UPLOAD_BYTES:
        raise InvalidUpload(f"the clip is {size / 2**20:.1f} MB; at most {MAX_UPLOAD_BYTES // 2**20} MB")
    if size == 0:
        raise InvalidUpload("the uploaded clip is an empty file")
    try:
        info = sf.info(str(path))
    except Exception as exc:  # libsndfile raises its own error type for anything it cannot parse
        raise InvalidUpload(f"{path.name!r} is not an audio file this app can read (WAV, FLAC, OGG or MP3)") from exc
    if info.samplerate <= 0 or info.frames <= 0:
        raise InvalidUpload(f"{path.name!r} holds no audio (corrupt or empty)")
    seconds = info.frames / info.samplerate
    if seconds > max_seconds:
        raise InvalidUpload(f"the clip lasts {_duration(seconds)}; a voice sample may last at most {max_seconds:g} s "
                            "(trim it to a few seconds of clear speech)")
    if seconds < MIN_SAMPLE_SECONDS:
        raise InvalidUpload("the sample clip is shorter than a quarter of a second")
    return seconds


def read_audio_upload(path: str | Path):
    """Check, then decode: (samples float32, sample_rate); a corrupt body is an InvalidUpload too."""
    import soundfile as sf

    check_audio_upload(path)
    try:
        return sf.read(str(path), dtype="float32", always_2d=False)
    except Exception as exc:
        raise InvalidUpload(f"{Path(path).name!r} is corrupt: its audio data cannot be decoded") from exc


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
