"""The synthesis engine on the real ChatTTS code path, with tiny synthetic weights."""

import threading
import time

import numpy as np
import pytest

from chattts_lab import (
    PRECISIONS,
    DeviceUnavailable,
    InvalidRequest,
    LoadConfig,
    Refine,
    Sampling,
    SynthesisRequest,
    UnsupportedPrecision,
    Voice,
    interrupt,
    load_model,
    synthesize,
    synthesize_stream,
)
from chattts_lab.metrics import samples_for_tokens
from chattts_lab.synthesis import SYNTHETIC_WARNING, encode_sample_audio, speaker_from_seed

from tests.conftest import TINY


def fixed(text, n, **kwargs):
    """A request that generates exactly n audio tokens per text (random weights rarely stop)."""
    return SynthesisRequest.of(text, max_new_token=n, min_new_token=n, **kwargs)


def test_audio_length_matches_tokens_generated(tiny_model):
    out = synthesize(tiny_model, fixed(["Hello world.", "A second, longer sentence here."], 12))
    m = out.measurements
    assert m.tokens == [12, 12]
    assert [len(a) for a in out.audio] == [samples_for_tokens(12)] * 2 == [(2 * 12 - 1) * 256] * 2
    assert m.audio_s == pytest.approx([(2 * 12 - 1) * 256 / 24000] * 2)
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for a in out.audio)


def test_stages_add_up_to_wall_time_and_rtf_follows(tiny_model):
    m = synthesize(tiny_model, fixed("Timing check.", 10)).measurements
    stages = m.stages.as_dict()
    assert sum(stages.values()) == pytest.approx(m.wall_s, rel=1e-6)
    assert stages["prefill_s"] > 0 and stages["decode_s"] > 0 and stages["decoder_s"] > 0 and stages["vocoder_s"] > 0
    # The GPT dominates: prefill + decode hold most of the wall time even on tiny weights.
    assert stages["prefill_s"] + stages["decode_s"] > 0.5 * m.wall_s
    assert m.rtf == pytest.approx(m.wall_s / m.audio_s[0])
    assert m.gpt_steps == 10 and m.step_ms == pytest.approx(stages["decode_s"] / 9 * 1000)
    assert m.peak_rss_mb > 100 and m.peak_device_mb is None


def test_effective_settings_are_recorded(tiny_model):
    eff = synthesize(tiny_model, fixed("x", 2)).measurements.effective
    assert eff["device"] == "cpu" and eff["dtype_gpt"] == "float32" and eff["threads"] == 1
    assert eff["engine"] == "stock" and eff["compile"] is False


def test_same_seeds_give_same_audio_and_other_seeds_differ(tiny_model):
    req = fixed("Seeds decide.", 8, voice=Voice(seed=7), sampling=Sampling(audio_seed=3))
    a, b = synthesize(tiny_model, req).audio[0], synthesize(tiny_model, req).audio[0]
    c = synthesize(tiny_model, fixed("Seeds decide.", 8, voice=Voice(seed=7), sampling=Sampling(audio_seed=4))).audio[0]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert speaker_from_seed(tiny_model, 7) == speaker_from_seed(tiny_model, 7) != speaker_from_seed(tiny_model, 8)


def test_speaker_string_and_sample_audio_voices(tiny_model):
    speaker = speaker_from_seed(tiny_model, 1)
    assert len(synthesize(tiny_model, fixed("Voice by string.", 4, voice=Voice(speaker=speaker))).audio[0]) > 0
    t = np.arange(24000) / 24000
    code = encode_sample_audio(tiny_model, 0.3 * np.sin(2 * np.pi * 220 * t), 24000)
    out = synthesize(tiny_model, fixed("Voice by sample.", 4, voice=Voice(sample_audio_code=code, sample_text="a clip")))
    assert out.measurements.tokens == [4]


def test_refine_text_is_timed_as_its_own_stage(tiny_model):
    req = SynthesisRequest(texts=("Refine me please.",), refine=Refine(enabled=True, max_new_token=8), max_new_token=4, min_new_token=4,
                           sampling=Sampling(text_seed=1))
    m = synthesize(tiny_model, req).measurements
    assert m.stages.refine_s > 0


def test_streaming_yields_early_chunks_and_time_to_first_audio(tiny_model):
    items = list(synthesize_stream(tiny_model, fixed("Stream this.", 80)))
    chunks, final = items[:-1], items[-1]
    assert len(chunks) >= 2, "stock streaming yields a chunk every 24 steps after the first two"
    m = final.measurements
    assert 0 < m.ttfa_s < m.wall_s and chunks[0].elapsed_s == m.ttfa_s
    assert m.tokens == [80] and len(final.audio[0]) == samples_for_tokens(80)


def test_interrupt_stops_a_long_synthesis(tiny_model):
    threading.Timer(0.5, interrupt, args=(tiny_model,)).start()
    t0 = time.perf_counter()
    out = synthesize(tiny_model, fixed("A long one.", 2000))
    assert time.perf_counter() - t0 < 30
    assert out.measurements.interrupted and out.measurements.tokens[0] < 2000
    assert synthesize(tiny_model, fixed("Next one works.", 3)).measurements.tokens == [3]


def test_synthetic_output_carries_the_warning(tiny_model):
    out = synthesize(tiny_model, fixed("Noise.", 2))
    assert out.synthetic and out.warning == SYNTHETIC_WARNING and "noise" in out.warning


@pytest.mark.parametrize(
    "texts, message",
    [
        ([""], "empty"),
        (["   \n\t "], "empty"),
        (["?!... ,,, [uv_break]"], "nothing to speak"),
        (["a" * 6000], "at most"),
        ([], "no text"),
    ],
)
def test_bad_text_is_refused_clearly(tiny_model, texts, message):
    with pytest.raises(InvalidRequest, match=message):
        synthesize(tiny_model, SynthesisRequest(texts=tuple(texts)))


def test_malformed_or_truncated_speaker_is_refused(tiny_model):
    good = speaker_from_seed(tiny_model, 2)
    for bad, message in [("not a speaker", "malformed"), (good[: len(good) // 2], "malformed|decodes"), (" ", "empty")]:
        with pytest.raises(InvalidRequest, match=message):
            synthesize(tiny_model, fixed("x", 2, voice=Voice(speaker=bad)))
    with pytest.raises(InvalidRequest, match="choose one voice"):
        synthesize(tiny_model, fixed("x", 2, voice=Voice(seed=1, speaker=good)))


def test_control_characters_are_dropped_not_fatal(tiny_model):
    out = synthesize(tiny_model, fixed("Hello\x00\x07 world 😀 混合 text", 2))
    assert out.measurements.tokens == [2]


@pytest.mark.parametrize(
    "config, error, message",
    [
        (LoadConfig(model=TINY, device="tpu"), DeviceUnavailable, "unsupported device type|unknown device"),
        (LoadConfig(model=TINY, device="cuda:0"), DeviceUnavailable, "not present"),
        (LoadConfig(model=TINY, device="mps"), DeviceUnavailable, "not present"),
        (LoadConfig(model=TINY, precision="fp64"), UnsupportedPrecision, "unknown precision"),
        (LoadConfig(model=TINY, engine="turbo"), UnsupportedPrecision, "unknown engine"),
        (LoadConfig(model=TINY, threads=0), ValueError, "threads"),
    ],
)
def test_bad_load_options_raise_clear_errors(config, error, message):
    with pytest.raises(error, match=message):
        load_model(config)


def test_loading_the_same_configuration_reuses_the_model(tiny_model):
    again = load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1))
    assert again is tiny_model


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precision_runs_or_says_why_not(precision):
    from chattts_lab.devices import parse_device
    from chattts_lab.precision import unsupported_reason

    reason = unsupported_reason("stock", parse_device("cpu"), precision)
    if reason:
        with pytest.raises(UnsupportedPrecision, match=reason):
            load_model(LoadConfig(model=TINY, precision=precision, threads=1))
        return
    model = load_model(LoadConfig(model=TINY, precision=precision, threads=1))
    out = synthesize(model, fixed("Precision check.", 4))
    expected = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "qint8"}[precision]
    assert out.measurements.effective["dtype_gpt"] == expected
    assert out.measurements.tokens == [4] and np.isfinite(out.audio[0]).all()
