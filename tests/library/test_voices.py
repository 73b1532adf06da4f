"""Voice cards, presets and sentence splitting: data in, clear errors out; cards reproduce their voice."""

import json

import numpy as np
import pytest

from chattts_lab import audio
from chattts_lab.requests import InvalidRequest, Refine, Sampling, SynthesisRequest, Voice
from chattts_lab.synthesis import encode_sample_audio, speaker_from_seed, synthesize
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


def speak(model, voice: Voice, sampling: Sampling, speed: int) -> np.ndarray:
    request = SynthesisRequest.of("Is this my voice?", voice=voice, sampling=sampling, speed=speed,
                                  max_new_token=6, min_new_token=6)
    return synthesize(model, request).audio[0]


def speak_card(model, card: VoiceCard) -> np.ndarray:
    return speak(model, card.voice, card.sampling, card.speed)


def test_a_voice_card_parsed_back_reproduces_the_audio_of_the_voice_it_was_made_from(tiny_model, tmp_path):
    """As the app exports it: the seed's speaker string, the sampling and the speed; every field must survive
    the JSON (a dropped temperature, seed or speed changes the audio)."""
    sampling = Sampling(0.5, 0.8, 15, audio_seed=7)
    original = speak(tiny_model, Voice(seed=42), sampling, speed=6)
    card = VoiceCard(name="narrator", speaker=speaker_from_seed(tiny_model, 42), seed=42, sampling=sampling, speed=6)
    assert np.array_equal(speak_card(tiny_model, parse_card(card.to_json())), original)
    save_card(card, tmp_path)
    assert np.array_equal(speak_card(tiny_model, resolve_voice("narrator", tmp_path)), original)
    assert not np.array_equal(speak(tiny_model, Voice(), sampling, speed=6), original)  # a voice was carried
    assert not np.array_equal(speak(tiny_model, Voice(seed=42), sampling, speed=5), original)  # so was the speed


def test_seed_voices_and_sample_audio_cards_reproduce_their_audio(tiny_model):
    sampling = Sampling(audio_seed=5)
    by_name = speak(tiny_model, resolve_voice("seed:42").voice, sampling, 5)
    assert np.array_equal(by_name, speak(tiny_model, Voice(speaker=speaker_from_seed(tiny_model, 42)), sampling, 5))
    t = np.arange(24000) / 24000
    code = encode_sample_audio(tiny_model, 0.3 * np.sin(2 * np.pi * 330 * t), 24000)
    original = speak(tiny_model, Voice(sample_audio_code=code, sample_text="a clip"), sampling, 5)
    card = VoiceCard(name="clip", sample_audio_code=code, sample_text="a clip", sampling=sampling)
    assert np.array_equal(speak_card(tiny_model, parse_card(card.to_json().encode())), original)
    assert not np.array_equal(speak(tiny_model, Voice(), sampling, 5), original)


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
