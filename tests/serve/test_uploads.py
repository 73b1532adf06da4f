"""Uploaded voice clips are checked before anything decodes them: type, corruption, duration, size.
The checks run on the app's own path (`chattts_lab.serve.speech.sample_audio_code`), before the model is touched."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from chattts_lab.serve.context import AppContext
from chattts_lab.serve.runtime import default_settings
from chattts_lab.serve.uploads import MAX_UPLOAD_BYTES, InvalidUpload, check_audio_upload


def _hours_of_silence(path, hours: float):
    with sf.SoundFile(str(path), "w", 8000, 1, "PCM_16", format="FLAC") as f:  # silence compresses to ~90 kB/h
        block = np.zeros(8000 * 60, dtype="int16")
        for _ in range(int(hours * 60)):
            f.write(block)
    return path


def _files(tmp_path):
    wav = tmp_path / "ok.wav"
    sf.write(wav, np.zeros(24000, dtype="float32"), 24000)
    truncated = tmp_path / "truncated.flac"
    sf.write(truncated, np.random.default_rng(0).standard_normal(24000).astype("float32") * 0.1, 24000, format="FLAC")
    body = truncated.read_bytes()
    corrupt = tmp_path / "corrupt.flac"  # an intact header promising 1 s, then garbage where the frames were
    corrupt.write_bytes(body[:200] + np.random.default_rng(1).bytes(len(body) - 200))
    truncated.write_bytes(body[:60])
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio, whatever its name says")
    exe = tmp_path / "clip.mp3"
    exe.write_bytes(b"\x7fELF" + b"\0" * 2000)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    big = tmp_path / "big.wav"
    with open(big, "wb") as f:
        f.truncate(MAX_UPLOAD_BYTES + 1)
    tiny = tmp_path / "tiny.wav"
    sf.write(tiny, np.zeros(100, dtype="float32"), 24000)
    return wav, {
        "not audio": (text, "not an audio file"),
        "a program": (exe, "not an audio file"),
        "empty": (empty, "empty file"),
        "over the size limit": (big, "at most 10 MB"),
        "hours long": (_hours_of_silence(tmp_path / "long.flac", 2), "lasts 2.0 h"),
        "too short": (tiny, "shorter than a quarter of a second"),
        "truncated": (truncated, "not an audio file"),  # 60 bytes: a FLAC header cut short
        "missing": (tmp_path / "gone.wav", "missing"),
        "corrupt": (corrupt, "corrupt"),
    }


def test_bad_clips_get_a_specific_message_before_the_model_is_touched(tmp_path, monkeypatch):
    from chattts_lab.serve import speech

    good, bad = _files(tmp_path)
    assert check_audio_upload(good) == pytest.approx(1.0)

    def no_model(*args, **kwargs):  # the checks must come first: reaching the model is the failure
        raise AssertionError("the model was touched for an invalid upload")

    monkeypatch.setattr(speech, "get_model", no_model)
    ctx = AppContext(outputs_dir=tmp_path / "outputs")
    for name, (path, message) in bad.items():
        with pytest.raises(InvalidUpload, match=message):
            speech.sample_audio_code(ctx, default_settings(), str(path))
