"""The limits README's "Sharing safely" promises, each tested on both sides of its edge: text 5,000
characters per request, batches of 64 texts, voice clips of 60 s. Moving a limit fails a test here."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from chattts_lab import InvalidRequest, SynthesisRequest, synthesize
from chattts_lab.requests import validate_request
from webui.security import InvalidUpload, check_audio_upload, read_audio_upload


def n_texts(n: int) -> list[str]:
    return [f"Text {i}." for i in range(n)]


def test_a_request_of_5000_characters_is_accepted_and_5001_refused(tiny_model):
    assert validate_request(SynthesisRequest.of("a" * 5000)).texts == ("a" * 5000,)
    with pytest.raises(InvalidRequest, match="text is 5,001 characters; at most 5,000 per request"):
        validate_request(SynthesisRequest.of("a" * 5001))
    # the limit is per request: a batch's texts count together
    with pytest.raises(InvalidRequest, match="text is 5,001 characters; at most 5,000 per request"):
        validate_request(SynthesisRequest.of(["a" * 2500, "b" * 2501]))
    # and synthesis refuses before the model works
    with pytest.raises(InvalidRequest, match="at most 5,000 per request"):
        synthesize(tiny_model, SynthesisRequest.of("a" * 5001, max_new_token=2, min_new_token=2))


def test_a_batch_of_64_texts_is_synthesized_and_65_refused(tiny_model):
    out = synthesize(tiny_model, SynthesisRequest.of(n_texts(64), max_new_token=2, min_new_token=2))
    assert out.measurements.tokens == [2] * 64 and len(out.audio) == 64
    with pytest.raises(InvalidRequest, match="65 texts in one batch; at most 64"):
        synthesize(tiny_model, SynthesisRequest.of(n_texts(65), max_new_token=2, min_new_token=2))


def test_the_bench_batch_limit_is_the_same_64(tmp_path, capsys):
    from bench.cli import main

    db = tmp_path / "lab.sqlite"
    assert main(["--model", "synthetic-tiny", "--batch", "64", "--dry-run", "--db", str(db)]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "synthetic-tiny", "--batch", "65", "--dry-run", "--db", str(db)])
    assert exit_info.value.code == 2 and "batch size must be in 1..64, got 65" in capsys.readouterr().err


def _clip(path, seconds: float, rate: int = 8000):
    """A clip of exactly `seconds` (8 kHz keeps a minute at under 1 MB)."""
    sf.write(path, np.zeros(int(round(seconds * rate)), dtype="float32"), rate, subtype="PCM_16")
    return path


def test_a_voice_clip_of_60_s_is_accepted_and_a_longer_one_refused(tmp_path):
    assert check_audio_upload(_clip(tmp_path / "minute.wav", 60.0)) == pytest.approx(60.0)
    samples, rate = read_audio_upload(tmp_path / "minute.wav")  # what the app decodes for the voice
    assert rate == 8000 and len(samples) == 60 * 8000
    with pytest.raises(InvalidUpload, match="lasts 61 s; a voice sample may last at most 60 s"):
        check_audio_upload(_clip(tmp_path / "longer.wav", 61.0))
    with pytest.raises(InvalidUpload, match="at most 60 s"):
        read_audio_upload(_clip(tmp_path / "just-over.wav", 60.01))
