"""The synthesis engine on the real ChatTTS code path, with tiny synthetic weights."""

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

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
    warm_up,
)
from chattts_lab.metrics import samples_for_tokens
from chattts_lab.synthesis import SYNTHETIC_WARNING, encode_sample_audio, speaker_from_seed
from chattts_lab import synthesis

from tests.conftest import CPU_PRECISION_TABLE, ROOT, TINY, x86_64_only

NOTHING_HAPPENED_S = 300  # a deadline for an event that never came, not a speed bound: the cores are shared


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


def test_stages_account_for_the_wall_time_and_rtf_follows(tiny_model):
    warm_up(tiny_model)  # the normaliser's one-time JIT (seconds) would land in 'other' on a first call
    m = synthesize(tiny_model, fixed("Timing check.", 40)).measurements
    stages = m.stages.as_dict()
    measured = sum(v for k, v in stages.items() if k != "other_s")
    assert stages["prefill_s"] > 0 and stages["decode_s"] > 0 and stages["decoder_s"] > 0 and stages["vocoder_s"] > 0
    # 'other' is the remainder (wall - stages, clamped at 0), so these bounds are what can fail: a stage counted
    # twice or overlapping another pushes the stages past the wall time (and the clamp would hide it); a stage
    # that lost its clock leaves its time in 'other'. Warm, 'other' is text normalisation and Python glue, about
    # 1 % of the stages here; the bound of the stages' whole time is generous enough for a busy machine.
    assert measured <= m.wall_s * (1 + 1e-9)
    assert stages["other_s"] == pytest.approx(m.wall_s - measured, abs=1e-9)
    assert stages["other_s"] < measured, stages
    # The GPT dominates: prefill + decode hold most of the wall time even on tiny weights.
    assert stages["prefill_s"] + stages["decode_s"] > 0.5 * m.wall_s
    assert m.rtf == pytest.approx(m.wall_s / m.audio_s[0])
    assert m.gpt_steps == 40 and m.step_ms == pytest.approx(stages["decode_s"] / 39 * 1000)
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


def test_a_seeds_speaker_is_remembered_as_drawn_and_only_so_many(tiny_model, monkeypatch):
    first = speaker_from_seed(tiny_model, 11)
    synthesis._speakers.clear()
    assert speaker_from_seed(tiny_model, 11) == first  # drawn again, the same string
    monkeypatch.setattr(synthesis, "SPEAKERS_KEPT", 2)
    for seed in (12, 13, 14):
        speaker_from_seed(tiny_model, seed)
    assert list(synthesis._speakers[tiny_model.chat]) == [13, 14]  # the oldest go


def voiced(model, voice: Voice) -> np.ndarray:
    """The audio of one fixed text and sampling seed in `voice`: only the voice differs between calls."""
    return synthesize(model, fixed("Whose voice is this?", 6, voice=voice, sampling=Sampling(audio_seed=3))).audio[0]


def test_a_speaker_string_gives_the_audio_of_the_seed_it_came_from(tiny_model):
    by_seed = voiced(tiny_model, Voice(seed=1))
    assert np.array_equal(voiced(tiny_model, Voice(speaker=speaker_from_seed(tiny_model, 1))), by_seed)
    assert not np.array_equal(voiced(tiny_model, Voice(seed=2)), by_seed)  # the voice does change the audio
    assert not np.array_equal(voiced(tiny_model, Voice()), by_seed)


def test_a_sample_audio_voice_changes_the_audio_and_reproduces(tiny_model):
    t = np.arange(24000) / 24000
    code = encode_sample_audio(tiny_model, 0.3 * np.sin(2 * np.pi * 220 * t), 24000)
    assert code == encode_sample_audio(tiny_model, 0.3 * np.sin(2 * np.pi * 220 * t), 24000)
    sampled = voiced(tiny_model, Voice(sample_audio_code=code, sample_text="a clip"))
    assert len(sampled) == samples_for_tokens(6)
    assert not np.array_equal(sampled, voiced(tiny_model, Voice()))
    assert np.array_equal(sampled, voiced(tiny_model, Voice(sample_audio_code=code, sample_text="a clip")))


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
    """Interrupt from another thread (as the app's Stop button does) while tokens are being generated. A real
    torch forward hook holds the GPT at its 5th forward pass until `interrupt` was called: no timer, no race."""
    hold_at, reached, interrupted = 5, threading.Event(), threading.Event()
    forwards = 0

    def hold(*_):
        nonlocal forwards
        forwards += 1
        if forwards == hold_at:
            reached.set()
            interrupted.wait(NOTHING_HAPPENED_S)

    hook = tiny_model.chat.gpt.gpt.register_forward_hook(hold)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(synthesize, tiny_model, fixed("A long one.", 2000))
            assert reached.wait(NOTHING_HAPPENED_S), "the GPT never reached its 5th forward pass"
            interrupt(tiny_model)
            interrupted.set()
            out = running.result(NOTHING_HAPPENED_S)
    finally:
        interrupted.set()
        hook.remove()
    # ChatTTS checks the flag after each step: the step under way finishes, and generation stops there.
    assert out.measurements.interrupted and out.measurements.tokens[0] == forwards == hold_at
    assert len(out.audio[0]) == samples_for_tokens(hold_at)
    assert synthesize(tiny_model, fixed("Next one works.", 3)).measurements.tokens == [3]


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_requested_before_the_synthesis_begins_is_not_lost(tiny_model, stream):
    """The app's Interrupt can land between "this session is running" and ChatTTS's `infer`, which clears its own
    interrupt flag when it starts. A stop event set before the call must still end it at its first step."""
    stop = threading.Event()
    stop.set()
    request = fixed("Stopped before it began.", 2000)
    out = (list(synthesize_stream(tiny_model, request, stop=stop))[-1] if stream
           else synthesize(tiny_model, request, stop=stop))
    assert out.measurements.interrupted
    assert out.measurements.tokens[0] < 2000
    assert synthesize(tiny_model, fixed("The next one is not stopped.", 3)).measurements.tokens == [3]


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
        # one past the last GPU: absent on every machine, with or without CUDA
        (LoadConfig(model=TINY, device=f"cuda:{torch.cuda.device_count()}"), DeviceUnavailable, "not present"),
        pytest.param(LoadConfig(model=TINY, device="mps"), DeviceUnavailable, "not present",
                     marks=pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")),
        (LoadConfig(model=TINY, precision="fp64"), UnsupportedPrecision, "unknown precision"),
        (LoadConfig(model=TINY, engine="turbo"), UnsupportedPrecision, "unknown engine"),
        (LoadConfig(model=TINY, threads=0), ValueError, "threads"),
    ],
)
def test_bad_load_options_raise_clear_errors(config, error, message):
    with pytest.raises(error, match=message):
        load_model(config)


def test_a_fresh_process_loads_the_text_normaliser_compiled_instead_of_compiling_it(tiny_model):
    """ChatTTS's normaliser is numba code: compiled anew it costs every process about 3.6 s of CPU at its first
    synthesis. Once one process has compiled it (this one, in its warm-up), the next loads every function of it from
    numba's cache on disk."""
    warm_up(tiny_model)
    fresh = subprocess.run([sys.executable, "-c", (
        "import json, ChatTTS.norm as norm; from numba.core.dispatcher import Dispatcher; "
        "from chattts_lab import LoadConfig, load_model, warm_up; "
        f"warm_up(load_model(LoadConfig(model={TINY!r}, device='cpu', precision='fp32', threads=1))); "
        "print(json.dumps({name: [len(f.stats.cache_hits), len(f.stats.cache_misses)] "
        "for name, f in vars(norm).items() if isinstance(f, Dispatcher)}))")],
        cwd=ROOT, capture_output=True, text=True, timeout=NOTHING_HAPPENED_S)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    counts = json.loads(fresh.stdout.splitlines()[-1])
    assert all(misses == 0 for _, misses in counts.values()), counts  # nothing compiled anew...
    # ...and what the normaliser calls loaded from disk (_find_index runs inside _fast_replace's compiled code)
    assert all(counts[name][0] >= 1 for name in ("_fast_replace", "_split_tags", "_combine_tags")), counts


def test_loading_the_same_configuration_reuses_the_model(tiny_model):
    again = load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1))
    assert again is tiny_model


@x86_64_only
@pytest.mark.parametrize("precision, expected", CPU_PRECISION_TABLE["stock"].items())
def test_each_stock_precision_runs_on_cpu_as_the_table_says(precision, expected):
    config = LoadConfig(model=TINY, precision=precision, threads=1)
    if expected.startswith("unsupported:"):
        with pytest.raises(UnsupportedPrecision, match=expected.removeprefix("unsupported:")):
            load_model(config)
        return
    out = synthesize(load_model(config), fixed("Precision check.", 4))
    assert out.measurements.effective["dtype_gpt"] == expected
    assert out.measurements.tokens == [4] and np.isfinite(out.audio[0]).all()


def test_the_precision_table_covers_every_engine_and_precision():
    from chattts_lab.engines import ENGINES

    assert set(CPU_PRECISION_TABLE) == set(ENGINES)
    for engine in ENGINES:
        assert set(CPU_PRECISION_TABLE[engine]) == set(PRECISIONS), engine
