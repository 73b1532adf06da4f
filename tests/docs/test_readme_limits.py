"""The limits the README promises (its "Sharing" section, a table the code writes: scripts/readme.py), each tested on
both sides of its edge: text characters per request, texts per batch, seconds of a voice clip. The table shows the
constants read here (tests/docs/test_readme_generated.py), so the page and the behaviour cannot part."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from chattts_lab import InvalidRequest, SynthesisRequest, synthesize
from chattts_lab.requests import validate_request
from chattts_lab.requests import MAX_BATCH, MAX_TEXT_CHARS
from chattts_lab.serve.uploads import MAX_SAMPLE_SECONDS, InvalidUpload, check_audio_upload, read_audio_upload

TEXT, BATCH, CLIP_S = MAX_TEXT_CHARS, MAX_BATCH, int(MAX_SAMPLE_SECONDS)  # 5,000, 64, 60


def n_texts(n: int) -> list[str]:
    return [f"Text {i}." for i in range(n)]


def test_a_request_of_the_stated_length_is_accepted_and_one_more_character_refused(tiny_model):
    refused = f"text is {TEXT + 1:,} characters; at most {TEXT:,} per request"
    assert validate_request(SynthesisRequest.of("a" * TEXT)).texts == ("a" * TEXT,)
    with pytest.raises(InvalidRequest, match=refused):
        validate_request(SynthesisRequest.of("a" * (TEXT + 1)))
    # the limit is per request: a batch's texts count together
    with pytest.raises(InvalidRequest, match=refused):
        validate_request(SynthesisRequest.of(["a" * (TEXT // 2), "b" * (TEXT - TEXT // 2 + 1)]))
    # and synthesis refuses before the model works
    with pytest.raises(InvalidRequest, match=f"at most {TEXT:,} per request"):
        synthesize(tiny_model, SynthesisRequest.of("a" * (TEXT + 1), max_new_token=2, min_new_token=2))


def test_a_batch_of_the_stated_size_is_synthesized_and_one_more_text_refused(tiny_model):
    out = synthesize(tiny_model, SynthesisRequest.of(n_texts(BATCH), max_new_token=2, min_new_token=2))
    assert out.measurements.tokens == [2] * BATCH and len(out.audio) == BATCH
    with pytest.raises(InvalidRequest, match=f"{BATCH + 1} texts in one batch; at most {BATCH}"):
        synthesize(tiny_model, SynthesisRequest.of(n_texts(BATCH + 1), max_new_token=2, min_new_token=2))


def test_the_bench_batch_limit_is_the_same(tmp_path, capsys):
    from bench.cli import main

    db = tmp_path / "lab.sqlite"
    assert main(["--model", "synthetic-tiny", "--batch", str(BATCH), "--dry-run", "--db", str(db)]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "synthetic-tiny", "--batch", str(BATCH + 1), "--dry-run", "--db", str(db)])
    assert exit_info.value.code == 2 and f"batch size must be in 1..{BATCH}, got {BATCH + 1}" in capsys.readouterr().err


def _clip(path, seconds: float, rate: int = 8000):
    """A clip of exactly `seconds` (8 kHz keeps a minute at under 1 MB)."""
    sf.write(path, np.zeros(int(round(seconds * rate)), dtype="float32"), rate, subtype="PCM_16")
    return path


def test_a_voice_clip_of_the_stated_length_is_accepted_and_a_longer_one_refused(tmp_path):
    assert check_audio_upload(_clip(tmp_path / "limit.wav", CLIP_S)) == pytest.approx(CLIP_S)
    samples, rate = read_audio_upload(tmp_path / "limit.wav")  # what the app decodes for the voice
    assert rate == 8000 and len(samples) == CLIP_S * 8000
    with pytest.raises(InvalidUpload, match=f"lasts {CLIP_S + 1} s; a voice sample may last at most {CLIP_S} s"):
        check_audio_upload(_clip(tmp_path / "longer.wav", CLIP_S + 1))
    with pytest.raises(InvalidUpload, match=f"at most {CLIP_S} s"):
        read_audio_upload(_clip(tmp_path / "just-over.wav", CLIP_S + 0.01))
