"""The quality measures on real speech (espeak-ng made here): clean beats degraded on every measure, the same voice
is closer to itself than to another, and the models load with the network blocked.

Every ordering is strict, so a measure replaced by a constant fails. The models load once per test process
(each module caches its own), and each clip is scored once (the module fixture)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chattts_lab.quality import intrusive, measures, speaker, wer
from tests.conftest import ROOT
from tests.support.espeak_speech import (OTHER_SENTENCE, OTHER_VOICE, SENTENCE, low_passed, needs_espeak, quantized, speak,
                                 with_noise)

pytestmark = needs_espeak
DEGRADED = {"noisy": lambda audio: with_noise(audio, snr_db=-10.0),  # drowns the words too
            "low-passed": low_passed, "quantized": quantized}


@pytest.fixture(scope="module")
def clean():
    return speak(SENTENCE)


@pytest.fixture(scope="module")
def scored(clean):
    """Every measure of the clean clip and of each degraded copy, all against the clean clip."""
    reference = measures.Reference.of(clean)
    clips = {"clean": clean, **{name: degrade(clean) for name, degrade in DEGRADED.items()}}
    return {name: measures.score_clip(audio, SENTENCE, reference) for name, audio in clips.items()}


@pytest.mark.parametrize("degradation", list(DEGRADED))
@pytest.mark.parametrize("figure", ["dnsmos_ovrl", "dnsmos_p808", "speaker_sim", "mel_distance_db", "stoi"])
def test_clean_scores_better_than_degraded(scored, figure, degradation):
    clean, worse = scored["clean"][figure], scored[degradation][figure]
    better = clean > worse if measures.HIGHER_IS_BETTER[figure] else clean < worse
    assert better, f"{figure}: clean {clean:.3f} vs {degradation} {worse:.3f}"


def test_word_error_rate_orders_clean_below_noisy(scored):
    # pocketsphinx hears espeak's robotic voice badly even clean (WER 0.7-1.0 here; at 0 dB SNR it can even score
    # lower than clean), so only the order against speech drowned in noise is tested, not a low WER
    assert scored["clean"]["wer"] < scored["noisy"]["wer"], (scored["clean"]["transcript"],
                                                             scored["noisy"]["transcript"])


def test_word_error_rate_depends_on_the_text(scored):
    heard = scored["clean"]["transcript"]
    assert heard, "the recogniser heard nothing in clean speech"
    assert wer.word_error_rate(SENTENCE, heard) < wer.word_error_rate(OTHER_SENTENCE, heard)
    assert wer.word_error_rate(SENTENCE, SENTENCE.upper() + "!") == 0.0  # case and punctuation are not errors
    assert wer.word_error_rate(SENTENCE, "") == 1.0


def test_the_same_voice_is_closer_to_itself_than_to_another(clean):
    same_voice = speaker.embed(speak(OTHER_SENTENCE))  # another sentence, so not the same samples
    other_voice = speaker.embed(speak(OTHER_SENTENCE, OTHER_VOICE))
    reference = speaker.embed(clean)
    assert speaker.similarity(reference, same_voice) > speaker.similarity(reference, other_voice) + 0.1


def test_intrusive_distances_refuse_clips_of_other_lengths(clean):
    assert intrusive.log_mel_distance(clean, clean[: len(clean) // 2]) is None
    assert intrusive.stoi(clean, clean[: len(clean) // 2]) is None
    assert intrusive.log_mel_distance(clean, clean) == 0.0


def test_every_figure_names_its_model_and_version(scored):
    names = measures.models()
    assert set(names) == {"mos", "wer", "speaker", "intrusive"}
    assert "speechmos 0.0.1.1" in names["mos"] and "pocketsphinx 5.1.1" in names["wer"]
    assert "resemblyzer 0.1.4" in names["speaker"] and "not installed" not in " ".join(names.values())
    assert set(scored["noisy"]["cpu_s"]) == {"dnsmos", "wer", "speaker", "mel", "stoi"}
    assert all(s["errors"] == {} for s in scored.values())  # every measure judged every clip


BLOCKED_NETWORK = """
import socket
def refuse(*args, **kwargs):
    raise OSError("network blocked by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import numpy as np
from chattts_lab.quality import measures
measures.load_all()
t = np.arange(16000 * 2) / 16000
tone = (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.float32) / 2
print("SCORED", sorted(measures.score_clip(tone, "a tone", measures.Reference.of(tone))))
"""


def test_models_load_and_score_with_the_network_blocked():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "", "no_proxy": ""}
    proc = subprocess.run([sys.executable, "-c", BLOCKED_NETWORK], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SCORED" in proc.stdout and "dnsmos_ovrl" in proc.stdout and "speaker_sim" in proc.stdout
