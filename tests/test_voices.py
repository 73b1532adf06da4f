"""Voice cards, presets and sentence splitting: data in, clear errors out (no model needed)."""

import json

import numpy as np
import pytest

from chattts_lab import audio
from chattts_lab.requests import InvalidRequest, Refine, Sampling
from chattts_lab.voices import (
    MAX_CARD_BYTES, PRESET_VOICES, InvalidVoiceCard, VoiceCard, parse_card, resolve_voice, save_card, split_sentences,
)


def card_json(**fields) -> str:
    return json.dumps({"format": "chattts-lab-voice", "version": 1, **fields})


def test_a_card_round_trips_with_its_seeds_and_params():
    card = VoiceCard(name="narrator", seed=42, sampling=Sampling(0.5, 0.8, 15, audio_seed=7, text_seed=9),
                     refine=Refine(True, 3, 1, 4), speed=6)
    assert parse_card(card.to_json()) == card
    assert json.loads(card.to_json())["refine"]["break"] == 4


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfe\x00", "not UTF-8"),
    ("not json at all", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"name": "x"}), "not a voice card"),
    (card_json(seed=1, shell="rm -rf /"), "unknown voice card fields: shell"),
    (card_json(seed="one"), "'seed' must be an integer"),
    (card_json(seed=1, sampling={"temperature": "hot"}), "sampling.temperature"),
    (card_json(seed=1, sampling={"temperature": 9.0}), "temperature must be in"),
    (card_json(speaker="definitely not a speaker"), "speaker string is malformed"),
    (card_json(name="x"), "holds no voice"),
    ("{" + " " * (MAX_CARD_BYTES + 10) + "}", "a card is"),
])
def test_bad_cards_are_refused_with_a_reason(data, message):
    with pytest.raises(InvalidVoiceCard, match=message):
        parse_card(data)


def test_voices_resolve_by_preset_seed_and_saved_card(tmp_path):
    assert resolve_voice("aria").seed == PRESET_VOICES["Aria"]
    assert resolve_voice("seed:123").voice.seed == 123
    save_card(VoiceCard(name="Office Voice", seed=5, speed=3), tmp_path)
    assert resolve_voice("Office Voice", tmp_path).speed == 3
    with pytest.raises(InvalidRequest, match="unknown voice 'nobody'"):
        resolve_voice("nobody", tmp_path)
    with pytest.raises(InvalidRequest, match="whole number"):
        resolve_voice("seed:abc")


def test_saved_card_names_cannot_escape_the_folder(tmp_path):
    path = save_card(VoiceCard(name="../../etc/passwd", seed=1), tmp_path / "voices")
    assert path.parent == tmp_path / "voices"


def test_long_text_splits_into_sentences_in_both_scripts():
    parts = split_sentences("你好。今天天气很好！Hello there. How are you? Fine", max_chars=12)
    assert parts == ["你好。今天天气很好！", "Hello there.", "How are you?", "Fine"]
    assert split_sentences("a. b. c.") == ["a. b. c."]  # short neighbours merge
    long = "word, " * 100
    assert all(len(p) <= 120 for p in split_sentences(long))


@pytest.mark.parametrize("fmt", audio.available_formats())
def test_audio_encodes_in_every_available_format(fmt):
    data = audio.encode(np.sin(np.arange(2400) / 5).astype(np.float32) * 0.5, fmt)
    assert len(data) > 100
    if fmt == "pcm":
        assert len(data) == 2400 * 2
    with pytest.raises(ValueError, match="unsupported audio format"):
        audio.encode(np.zeros(10), "ogg-vorbis-9000")
