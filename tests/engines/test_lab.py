"""The lab engine against stock ChatTTS, on the real ChatTTS code with tiny synthetic weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from chattts_lab.engines import unsupported_reason
from chattts_lab.engines.lab.linear import (FbgemmInt8Linear, Int4Linear, PackedInt4Linear, PackedInt8Linear,
                                    WeightOnlyInt8Linear, int4_available, int8_kernels)
from chattts_lab.metrics import samples_for_tokens
from chattts_lab.models import LoadConfig, load_model, unload_all
from chattts_lab.engines import UnsupportedPrecision
from chattts_lab.requests import Refine, Sampling, SynthesisRequest
from chattts_lab.synthesis import interrupt, synthesize, synthesize_stream

from tests.conftest import CPU_PRECISION_TABLE, TINY, x86_64_only

TEXTS = ["Hello there, this is a test.", "A second text, longer than the first one by a little."]
CPU = torch.device("cpu")


def load(engine: str, precision: str = "fp32"):
    return load_model(LoadConfig(model=TINY, precision=precision, engine=engine, threads=1))


def code_tokens(model, texts, max_new_token, seed, temperature=0.3, min_new_token=0):
    """Audio tokens and hidden states straight from ChatTTS's `_infer_code` (which calls gpt.generate)."""
    import ChatTTS

    chat = model.chat
    params = ChatTTS.Chat.InferCodeParams(
        temperature=temperature, max_new_token=max_new_token, min_new_token=min_new_token,
        manual_seed=seed, show_tqdm=False,
    )
    texts = [chat.normalizer(t, True, True, None) for t in texts]
    out = next(chat._infer_code(texts, False, chat.device, True, params))
    return [t.clone() for t in out.ids], [h.clone() for h in out.hiddens]


REFINE_TOKENS = 12


def refine_tokens(model, text, seed):
    """Text tokens of ChatTTS's refine pass (`_refine_text`, which calls gpt.generate with infer_text)."""
    import ChatTTS

    params = ChatTTS.Chat.RefineTextParams(max_new_token=REFINE_TOKENS, min_new_token=REFINE_TOKENS,
                                           manual_seed=seed, show_tqdm=False)
    return [t.clone() for t in model.chat._refine_text(text, model.chat.device, params).ids]


@pytest.fixture(scope="module")
def stock_runs():
    """Stock fp32 outputs for the cases compared below (one model load)."""
    unload_all()
    model = load("stock")
    runs = {
        "greedy": code_tokens(model, TEXTS[:1], 24, seed=5, temperature=1e-4),
        "sampled": code_tokens(model, TEXTS[:1], 24, seed=5),
        "refine": refine_tokens(model, TEXTS[0], seed=3),
    }
    # a batch whose items stop at different steps (EOS): pick the first seed that shows it
    for seed in range(40):
        ids, hid = code_tokens(model, TEXTS, 40, seed=seed)
        if len({len(t) for t in ids}) > 1:
            runs["batch"] = (ids, hid, seed)
            break
    unload_all()
    return runs


@pytest.fixture
def lab_fp32():
    return load("lab")  # reused from load_model's cache while no other configuration was loaded


def test_lab_fp32_greedy_tokens_match_stock(stock_runs, lab_fp32):
    ids, hid = code_tokens(lab_fp32, TEXTS[:1], 24, seed=5, temperature=1e-4)
    ref_ids, ref_hid = stock_runs["greedy"]
    assert torch.equal(ids[0], ref_ids[0])
    torch.testing.assert_close(hid[0], ref_hid[0], rtol=1e-4, atol=1e-4)


def test_lab_fp32_sampled_tokens_match_stock_with_same_seed(stock_runs, lab_fp32):
    ids, _ = code_tokens(lab_fp32, TEXTS[:1], 24, seed=5)
    assert torch.equal(ids[0], stock_runs["sampled"][0][0])


def test_lab_fp32_batch_stops_each_item_at_its_own_eos_like_stock(stock_runs, lab_fp32):
    assert "batch" in stock_runs, "no seed below 40 made the tiny model stop items at different steps"
    ref_ids, ref_hid, seed = stock_runs["batch"]
    ids, hid = code_tokens(lab_fp32, TEXTS, 40, seed=seed)
    assert [len(t) for t in ids] == [len(t) for t in ref_ids]
    for a, b in zip(ids, ref_ids):
        assert torch.equal(a, b)
    for a, b in zip(hid, ref_hid):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_fused_cpu_kernels_compute_what_the_torch_ops_compute(stock_runs, lab_fp32):
    """The lab's fused decode kernels (C++, built here on first use) against its torch-op path, padding included."""
    from chattts_lab.engines.lab import kernels

    model = lab_fp32.engine.gpt_module
    if kernels.load() is None:
        pytest.skip("no C++ toolchain here: the lab runs its torch-op path (tested by the stock comparisons)")
    assert "fused-decode" in lab_fp32.effective["kernels"] and model.fused is not None
    seed = stock_runs["batch"][2]
    fused_ids, fused_hid = code_tokens(lab_fp32, TEXTS, 40, seed=seed)
    model.fused = None
    try:
        torch_ids, torch_hid = code_tokens(lab_fp32, TEXTS, 40, seed=seed)
    finally:
        model.fused = kernels.load()
    for a, b in zip(fused_ids, torch_ids):
        assert torch.equal(a, b)
    for a, b in zip(fused_hid, torch_hid):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def levels_here():
    """Every kernel level this CPU runs (an AVX-512 VNNI machine runs all four), each built once per machine."""
    from chattts_lab.engines.lab import cpu

    return cpu.runnable_levels()


def kernels_at(level):
    from chattts_lab.engines.lab import cpu, kernels

    if level not in cpu.runnable_levels():
        pytest.skip(f"this CPU cannot run the {level} level")
    fused = kernels.load(level)
    if fused is None:
        pytest.skip("no C++ toolchain here: the lab runs its torch-op path")
    return fused


ALL_LEVELS = ("avx512_vnni", "avx_vnni", "avx2", "portable")


NARROW_CACHES = [torch.bfloat16, torch.int8]  # what lab int8/int4 ran with before 2026-12-05, and since
CACHES = [torch.float32, *NARROW_CACHES]


def _cache(values: torch.Tensor, dtype) -> torch.Tensor:
    """A KV cache [B, H, T, line] of `dtype` holding `values` [B, H, T, Dh] (rounded as the model writes them)."""
    from chattts_lab.engines.lab import kv_cache

    B, H, T, Dh = values.shape
    cache = kv_cache.allocate(B, H, T, Dh, dtype, "cpu")
    kv_cache.write(cache, 0, values)
    return cache


def _values(cache: torch.Tensor) -> torch.Tensor:
    from chattts_lab.engines.lab import kv_cache

    return kv_cache.read(cache, cache.shape[2], torch.float32)


@pytest.mark.parametrize("level", ALL_LEVELS)
@pytest.mark.parametrize("dtype", NARROW_CACHES)
def test_fused_attention_reads_a_narrow_cache_as_the_fp32_values_it_holds(dtype, level):
    """The bf16 or int8-line KV cache (lab int8/int4) against an fp32 cache holding the same rounded values; the
    step's new k and v are rounded once, as the model's prompt pass rounds them (kv_cache.write)."""
    fused = kernels_at(level)
    torch.manual_seed(0)
    B, H, T, Dh, slot = 2, 3, 10, 8, 6
    qkv = torch.randn(B, 3 * H * Dh)
    angle = torch.rand(B, Dh // 2) * 3
    rot = torch.stack([angle.cos(), angle.sin()], -1).contiguous()
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, :2] = False  # a padded prompt
    k, v = _cache(torch.randn(B, H, T, Dh), dtype), _cache(torch.randn(B, H, T, Dh), dtype)
    k32, v32 = _values(k), _values(v)
    got = fused.decode_attention(qkv, rot, k, v, slot, slot + 1, valid)
    want = fused.decode_attention(qkv, rot, k32, v32, slot, slot + 1, valid)
    for narrow, wide in ((k, k32), (v, v32)):
        assert torch.equal(_values(narrow)[:, :, slot], _values(_cache(wide[:, :, slot:slot + 1], dtype))[:, :, 0])
        assert torch.equal(_values(narrow)[:, :, :slot], wide[:, :, :slot])  # nothing else written
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)  # only the current slot's rounding differs


def test_int8_cache_lines_hold_each_positions_values_to_half_a_step_of_its_own_scale():
    from chattts_lab.engines.lab import kv_cache

    torch.manual_seed(0)
    values = torch.randn(2, 3, 5, 64) * torch.logspace(-3, 2, 5)[:, None]  # positions of very different sizes
    values[0, 0, 2] = 0  # an all-zero line: scale 1, values 0
    cache = _cache(values, torch.int8)
    assert cache.shape == (2, 3, 5, 64 + kv_cache.SCALE_BYTES)
    step = values.abs().amax(-1, keepdim=True) / 127
    assert ((_values(cache) - values).abs() <= step / 2 + 1e-6 * step).all()
    assert torch.equal(_values(cache)[0, 0, 2], torch.zeros(64))
    assert torch.equal(kv_cache.read(cache, 3, torch.float32), _values(cache)[:, :, :3])


@pytest.mark.parametrize("level", ALL_LEVELS)
def test_kernels_write_and_read_int8_lines_as_the_torch_ops_do(level):
    """A prompt's pass writes and widens int8 lines with the kernels where they are loaded: the same bytes, the same
    values, for values laid out as the model hands them over (heads and positions transposed) and a cache that is a
    view of some rows of a larger one (a continuous batch's row)."""
    from chattts_lab.engines.lab import kv_cache

    fused = kernels_at(level)
    torch.manual_seed(0)
    values = (torch.randn(1, 7, 3, 64) * torch.logspace(-2, 1, 7)[:, None, None]).transpose(1, 2)  # [B, H, S, Dh]
    assert not values.is_contiguous()
    by_torch, by_kernels = (torch.zeros(4, 3, 12, 68, dtype=torch.int8) for _ in range(2))
    kv_cache.write(by_torch[2:3], 5, values)
    kv_cache.write(by_kernels[2:3], 5, values, fused)
    assert torch.equal(by_kernels, by_torch)
    assert torch.equal(kv_cache.read(by_kernels[2:3], 9, torch.float32, fused),
                       kv_cache.read(by_torch[2:3], 9, torch.float32))


def _attention_reference(qkv, rot, k_cache, v_cache, slot, end, valid):
    """decode_attention's contract in torch ops: rotate q and k (adjacent pairs), write k and v at `slot`, attend
    over slots [0, end) where `valid`."""
    k_cache, v_cache = _values(k_cache), _values(v_cache)
    B, H, _, Dh = k_cache.shape
    q, k, v = qkv.view(B, 3, H, Dh).unbind(1)
    turn = torch.view_as_complex(rot)[:, None]  # [B, 1, Dh/2]
    rotate = lambda x: torch.view_as_real(torch.view_as_complex(x.reshape(B, H, Dh // 2, 2)) * turn).reshape(B, H, Dh)
    k_cache[:, :, slot], v_cache[:, :, slot] = rotate(k), v
    scores = torch.einsum("bhd,bhtd->bht", rotate(q), k_cache[:, :, :end].float()) / Dh**0.5
    scores = scores.masked_fill(~valid[:, None, :end], float("-inf"))
    return torch.einsum("bht,bhtd->bhd", scores.softmax(-1), v_cache[:, :, :end].float()).reshape(B, H * Dh)


@pytest.mark.parametrize("level", ALL_LEVELS)
@pytest.mark.parametrize("dtype", CACHES)
def test_fused_attention_of_64_dim_heads_computes_softmax_attention(dtype, level):
    """ChatTTS's heads are 64 wide: the kernel's path that scores 16 (AVX2: 8) cached positions at a time and keeps
    the output in registers, against torch ops, at lengths that leave partial groups and with a padded prompt."""
    fused = kernels_at(level)
    torch.manual_seed(0)
    B, H, T, Dh = 3, 2, 50, 64
    for end in (1, 15, 16, 17, 33, 50):
        qkv, angle = torch.randn(B, 3 * H * Dh), torch.rand(B, Dh // 2) * 3
        rot = torch.stack([angle.cos(), angle.sin()], -1).contiguous()
        valid = torch.ones(B, T, dtype=torch.bool)
        valid[1, : min(5, end - 1)] = False  # a padded prompt
        k, v = _cache(torch.randn(B, H, T, Dh), dtype), _cache(torch.randn(B, H, T, Dh), dtype)
        want = _attention_reference(qkv, rot, k, v, end - 1, end, valid)
        got = fused.decode_attention(qkv, rot, k, v, end - 1, end, valid)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 if dtype == torch.float32 else 2e-2)


@pytest.mark.parametrize("level", ALL_LEVELS)
@pytest.mark.parametrize("dtype", CACHES)
@pytest.mark.parametrize("Dh", [64, 32])
def test_rows_behind_the_longest_read_only_their_own_slots(Dh, dtype, level):
    """In a continuous batch a step writes every row's keys and values at the longest row's next slot, and a row
    behind attends to its own slots and that one (continuous.RowDecoder._step's mask). The kernel scores only those:
    the masked slots between hold NaN here, which any read of them would carry into the output."""
    fused = kernels_at(level)
    torch.manual_seed(0)
    B, H, T = 4, 2, 64
    slot, lengths = 50, [50, 1, 17, 33]  # the longest row's own next slot is the step's; partial groups of 16 and 8
    qkv, angle = torch.randn(B, 3 * H * Dh), torch.rand(B, Dh // 2) * 3
    rot = torch.stack([angle.cos(), angle.sin()], -1).contiguous()
    slots = torch.arange(slot + 1)
    valid = (slots[None] < torch.tensor(lengths)[:, None]) | (slots[None] == slot)
    k, v = _cache(torch.randn(B, H, T, Dh), dtype), _cache(torch.randn(B, H, T, Dh), dtype)
    want = _attention_reference(qkv, rot, k, v, slot, slot + 1, valid)
    for b, n in enumerate(lengths):
        for cache in (k, v):  # an int8 line's scale made NaN: any read of the line is NaN
            poisoned = cache[b, :, n:slot, -4:].view(torch.float32) if dtype == torch.int8 else cache[b, :, n:slot]
            poisoned.fill_(float("nan"))
    got = fused.decode_attention(qkv, rot, k, v, slot, slot + 1, valid)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 if dtype == torch.float32 else 2e-2)


@pytest.mark.parametrize("level", [None, *ALL_LEVELS])  # None: torch's indexing, where the kernels are not loaded
@pytest.mark.parametrize("dtype", CACHES)
def test_rows_behind_move_the_steps_keys_and_values_to_their_own_slots(dtype, level):
    """continuous.copy_behind does what the indexing it replaced did, in every cache, and nothing else (an int8
    line's scale moves with it)."""
    from chattts_lab.engines.lab.continuous import copy_behind

    fused = kernels_at(level) if level else None
    torch.manual_seed(0)
    caches = [_cache(torch.randn(5, 3, 40, 16), dtype) for _ in range(4)]
    want = [c.clone() for c in caches]
    rows, own, s = torch.tensor([1, 2, 4]), torch.tensor([7, 0, 38]), 39
    for c in want:
        c[rows, :, own] = c[rows, :, s]
    copy_behind(caches, rows, own, s, fused)
    for got, expected in zip(caches, want):
        assert torch.equal(got, expected)


def test_fused_kernels_can_be_switched_off(monkeypatch):
    from chattts_lab.engines.lab import kernels

    monkeypatch.setenv("CHATTTS_LAB_KERNELS", "off")
    assert "CHATTTS_LAB_KERNELS=off" in kernels.disabled_reason()
    assert kernels._load.__wrapped__("avx2") is None  # uncached: what a fresh process with the switch off gets


def test_a_lower_kernel_level_can_be_forced_and_an_impossible_one_is_refused(monkeypatch):
    """CHATTTS_LAB_ISA picks the level (so an AVX-512 machine runs the AVX2 code); FAKE CPU flags stand for CPUs
    this machine is not: a level the CPU cannot run is refused with the reason, never built (it would crash)."""
    from chattts_lab.engines.lab import cpu

    avx2_only = cpu.CpuFeatures(frozenset({"avx2", "fma", "f16c", "sse4_2"}))
    intel_hybrid = cpu.CpuFeatures(avx2_only.flags | {"avx_vnni"})
    assert cpu.runnable_levels(avx2_only)[0] == "avx2"
    assert cpu.runnable_levels(intel_hybrid)[:2] == ("avx_vnni", "avx2")
    monkeypatch.delenv(cpu.FORCE_ENV, raising=False)
    assert cpu.kernel_level(avx2_only) == "avx2"
    monkeypatch.setenv(cpu.FORCE_ENV, "portable")
    assert cpu.kernel_level(avx2_only) == "portable"
    monkeypatch.setenv(cpu.FORCE_ENV, "avx512_vnni")
    with pytest.raises(ValueError, match="cannot run that level; it runs avx2, portable"):
        cpu.kernel_level(avx2_only)
    monkeypatch.setenv(cpu.FORCE_ENV, "sse9")
    with pytest.raises(ValueError, match="not a kernel level; choose one of avx512_vnni, avx_vnni, avx2, portable"):
        cpu.kernel_level(avx2_only)
    # the AVX2 build is compiled without AVX-512 (the tuning is the CPU's, the instructions only the level's)
    flags = cpu.level_cflags("avx2", avx2_only)
    assert "-mavx2" in flags and not any("512" in f or "march" in f for f in flags)


def test_lab_engine_reports_what_took_effect(lab_fp32):
    eff = lab_fp32.effective
    assert eff["engine"] == "lab" and eff["dtype_gpt"] == "float32" and eff["compile"] is False
    assert lab_fp32.engine.compiled is False
    from chattts_lab.engines.lab.linear import fp32_rows_kernels

    rows = fp32_rows_kernels()
    decode_kernel = f"lab-fp32-rows {rows.simd()}" if rows is not None else "float32-matmul "
    assert eff["kernels"].startswith(decode_kernel) and eff["kernels"].endswith("kv-cache fp32")


@pytest.mark.parametrize("level", ["avx512_vnni", "avx_vnni", "avx2"])
def test_fp32_decode_rows_compute_what_torch_linear_computes(level, monkeypatch):
    """The lab's fp32 kernel for a decode step's 1-8 rows (AVX-512 and AVX2) against F.linear, on shapes that leave a
    partial block of 16 (8) output rows; a prompt's 9+ rows go to torch's own GEMM."""
    from chattts_lab.engines.lab import cpu
    from chattts_lab.engines.lab.linear import FloatLinear

    fused = kernels_at(level)
    monkeypatch.setenv(cpu.FORCE_ENV, level)
    torch.manual_seed(0)
    for n, k in [(8, 32), (16, 32), (17, 64), (100, 96), (2304, 768), (768, 3072)]:
        module = FloatLinear(torch.randn(n, k), torch.float32)
        assert module.kernel == f"lab-fp32-rows {fused.simd()}"
        for m in range(1, 9):
            x = torch.randn(1, m, k)
            torch.testing.assert_close(module(x), F.linear(x, module.weight), rtol=1e-5, atol=1e-5 * k**0.5)
        prompt = torch.randn(2, 9, k)
        assert torch.equal(module(prompt), F.linear(prompt, module.weight))


@x86_64_only
def test_lab_int8_records_the_int8_kernel_this_cpu_runs():
    """AVX-512 VNNI (and a compiler): the lab's own int8 GEMM; other x86 CPUs: fbgemm at its level. Stock: fbgemm."""
    from chattts_lab.engines.lab import cpu, kernels

    isa = cpu.detect().int8_isa
    if isa is None:
        pytest.skip("this CPU has no AVX2: lab int8 runs weight-only int8 (see the fake-CPU test below)")
    fused = kernels.load()
    unload_all()
    eff = load("lab", "int8").effective
    lab_kernel = f"lab-int8 {cpu.kernel_level()}" if fused is not None else f"fbgemm-int8 {isa}"
    assert eff["kernels"].startswith(f"{lab_kernel}; ") and eff["kernels"].endswith("kv-cache int8")
    assert load("stock", "int8").effective["kernels"] == f"fbgemm-int8 {isa}"
    unload_all()


# x's leading dims in the GEMM tests: a decode step's 1 to 16 rows (batch 2 of 1 to 8, one odd count), then many rows
# (from 16 the x86 levels' int8 runs its many-rows tiles): odd counts leave a last tile of one row
ROWS_OF_X = [(2, m) for m in (1, 2, 3, 4, 5, 7, 8)] + [(9,), (17,), (2, 9), (31,), (2, 33), (100,)]


@pytest.mark.parametrize("level", ALL_LEVELS)
def test_int8_gemm_matches_the_dequantized_matmul_for_any_rows_and_batch(level):
    """The lab's int8 GEMM at each level (gemm_*.cpp) against x @ dequantized W and against the portable level, on
    shapes that leave partial blocks and tiles: output rows not a multiple of 16 or 32, K not a multiple of 32, 1 to
    16 rows of x (a decode step's tiles) and 17 to 100 (many rows: a prompt, a decoder's frames), odd and even."""
    from chattts_lab.engines.lab.linear import per_channel_int8

    fused = kernels_at(level)
    torch.manual_seed(0)
    for n, k in [(16, 16), (17, 32), (33, 48), (100, 64), (130, 768), (2504, 768)]:
        w = torch.randn(n, k)
        q, scales = per_channel_int8(w)
        module = PackedInt8Linear(w, fused)
        assert module.packed.numel() == -(-n // 16) * 16 * k  # one packed copy, rows padded to 16
        for rows in ROWS_OF_X:
            x = torch.randn(*rows, k)
            want = x @ (q.float() * scales[:, None]).T
            got = module(x)
            assert got.shape == (*rows, n)
            assert float((got - want).norm() / want.norm()) < 0.02, (n, k, rows)  # 8-bit activations' rounding
            if len(got) == 100:  # per-row scales: rows alone (a decode step's tiles) give what they give among many
                assert torch.equal(module(x[:7]), got[:7]), (n, k)
            # the same 8-bit activations and int32 sums at every level: equal to the portable loops within fp32
            portable = fused.int8_linear_portable(x, *module.tensors, n)
            torch.testing.assert_close(got, portable, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", ALL_LEVELS)
def test_int4_gemm_matches_the_dequantized_matmul_for_any_rows_and_batch(level):
    """The lab's int4 GEMM at each level against x @ dequantized W (groups of 128) and against the portable level,
    on shapes that leave partial blocks: output rows not a multiple of 16, 1 to 100 rows of x, weights not centred."""
    from chattts_lab.engines.lab.linear import PackedInt4Linear, per_group_uint4

    fused = kernels_at(level)
    torch.manual_seed(0)
    group = fused.int4_group()
    for n, k in [(16, 128), (17, 256), (100, 768), (2504, 768), (768, 3072)]:
        w = torch.randn(n, k) + 0.5
        u, scales, mins = per_group_uint4(w, group)
        assert int(u.max()) <= 15
        dequantized = (u.float().view(n, -1, group) * scales[..., None] + mins[..., None]).view(n, k)
        assert float((dequantized - w).norm() / w.norm()) < 0.1
        module = PackedInt4Linear(w, fused)
        assert module.packed.numel() == -(-n // 16) * 16 * k // 2  # two weights a byte, rows padded to 16
        for rows in ROWS_OF_X:
            x = torch.randn(*rows, k)
            want = x @ dequantized.T
            got = module(x)
            assert got.shape == (*rows, n)
            assert float((got - want).norm() / want.norm()) < 0.02, (n, k, rows)  # 8-bit activations' rounding
            # same integer sums; only the order the fp32 group sums are added in differs between levels
            portable = fused.int4_linear_portable(x, *module.tensors, n)
            torch.testing.assert_close(got, portable, rtol=1e-4, atol=1e-4 * float(portable.abs().max()))


@pytest.mark.parametrize("level", ["best", "avx2"])
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_packed_step_in_one_call_computes_what_the_layer_loop_computes(precision, level, monkeypatch):
    """Lab int8 and int4 run each decode step as one C++ call (decode_step_packed), at this CPU's best level and at
    AVX2 forced; the per-layer Python loop over the same kernels gives the same tokens and hidden states."""
    from chattts_lab.engines.lab import cpu

    monkeypatch.setenv(cpu.FORCE_ENV, level)
    if level != "best":
        kernels_at(level)
    if int8_kernels() is None:
        pytest.skip("no compiler here: the step runs torch's and fbgemm's kernels layer by layer")
    unload_all()
    model = load("lab", precision)
    gpt = model.engine.gpt_module
    assert gpt.packed_step is not None
    assert model.effective["kernels"].startswith(f"lab-{precision} {cpu.kernel_level()}; ")
    one_call = code_tokens(model, TEXTS, 24, seed=7)
    saved, gpt.packed_step = gpt.packed_step, None
    try:
        layer_loop = code_tokens(model, TEXTS, 24, seed=7)
    finally:
        gpt.packed_step = saved
    for a, b in zip(one_call[0], layer_loop[0]):
        assert torch.equal(a, b)
    for a, b in zip(one_call[1], layer_loop[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    unload_all()


def test_lab_int8_keeps_one_int8_copy_of_the_text_tables_and_still_refines():
    """Under lab int8 ChatTTS's text embedding and text head are int8 (its fp32 ones are gone from the
    Chat: the GPT's bound methods included), and the prompt and refine pass run through them."""
    from chattts_lab.engines.lab.linear import Int8Embedding

    unload_all()
    model = load("lab", "int8")
    chat = model.chat
    assert isinstance(chat.embed.emb_text, Int8Embedding) and chat.gpt.emb_text.__self__ is chat.embed.emb_text
    assert chat.gpt.head_text.__self__ is chat.embed.head_text and chat.embed.head_text.effective_dtype == "int8"
    assert not [n for n, p in chat.embed.named_parameters() if "text" in n]  # no fp32 text table left
    assert not [n for n, p in chat.embed.named_parameters() if "head_code" in n]  # the lab's Heads hold them
    ids = refine_tokens(model, TEXTS[0], seed=3)
    assert len(ids[0]) == REFINE_TOKENS
    req = SynthesisRequest.of(TEXTS[0], max_new_token=4, min_new_token=4, sampling=Sampling(audio_seed=1))
    out = synthesize(model, req)
    assert out.measurements.tokens == [4] and np.isfinite(out.audio[0]).all()
    unload_all()


def test_int8_isa_follows_fbgemm_dispatch_order():
    from chattts_lab.engines.lab.cpu import CpuFeatures

    avx512 = {"avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl"}
    assert CpuFeatures(frozenset(avx512 | {"avx512_vnni"})).int8_isa == "avx512_vnni"
    assert CpuFeatures(frozenset(avx512)).int8_isa == "avx512"
    assert CpuFeatures(frozenset({"avx2", "fma", "avx_vnni"})).int8_isa == "avx2"
    assert CpuFeatures(frozenset({"asimd"})).int8_isa is None


def test_fake_cpu_without_avx2_runs_the_portable_kernels_or_weight_only_int8(monkeypatch):
    """FAKE CPU flags (this machine has AVX2): a CPU without AVX2 (or ARM64) runs the lab's portable kernels; with the
    kernels off, where fbgemm has only reference loops, int8 is weight-only."""
    from chattts_lab.engines.lab import cpu
    from chattts_lab.engines.lab.linear import make_linear

    monkeypatch.setattr(cpu, "detect", lambda: cpu.CpuFeatures(frozenset({"asimd"})))
    assert cpu.kernel_level() == "portable"
    module = make_linear(torch.randn(16, 16), "int8", CPU, torch.float32)
    assert isinstance(module, PackedInt8Linear) and module.kernel == "lab-int8 portable"
    from chattts_lab.engines.lab import kernels

    monkeypatch.setattr(kernels, "load", lambda level=None: None)  # what a machine without a compiler gets
    module = make_linear(torch.randn(16, 8), "int8", CPU, torch.float32)
    assert isinstance(module, WeightOnlyInt8Linear) and module.kernel == "weight-only-int8"


def test_lab_refine_pass_matches_stock_and_is_timed_as_its_own_stage(stock_runs, lab_fp32):
    ids = refine_tokens(lab_fp32, TEXTS[0], seed=3)
    assert len(ids[0]) == REFINE_TOKENS and torch.equal(ids[0], stock_runs["refine"][0])
    req = SynthesisRequest.of(TEXTS[0], refine=Refine(enabled=True, max_new_token=8), max_new_token=4, min_new_token=4,
                              sampling=Sampling(text_seed=1))
    m = synthesize(lab_fp32, req).measurements
    assert m.stages.refine_s > 0 and m.stages.prefill_s > 0 and m.stages.decode_s > 0
    assert m.tokens == [4] and m.gpt_steps == 4  # the refine pass's forwards are its own stage, not audio steps


@x86_64_only
@pytest.mark.parametrize("precision, expected", CPU_PRECISION_TABLE["lab"].items())
def test_every_lab_precision_runs_on_cpu_as_the_table_says(precision, expected):
    if expected.startswith("unsupported:"):
        with pytest.raises(UnsupportedPrecision, match=expected.removeprefix("unsupported:")):
            load("lab", precision)
        return
    unload_all()
    model = load("lab", precision)
    out = synthesize(model, SynthesisRequest.of(TEXTS[0], max_new_token=6, min_new_token=6, sampling=Sampling(audio_seed=1)))
    m = out.measurements
    assert m.tokens == [6] and len(out.audio[0]) == samples_for_tokens(6)
    assert np.isfinite(out.audio[0]).all()
    assert m.gpt_steps == 6 and m.stages.prefill_s > 0 and m.stages.decode_s > 0  # the recorder saw each forward
    assert m.effective["dtype_gpt"] == expected
    unload_all()


def test_lab_reasons_for_what_cannot_run():
    with pytest.raises(UnsupportedPrecision, match="unknown precision 'int3'"):
        load("lab", "int3")
    assert "unknown precision 'int3'" in unsupported_reason("lab", CPU, "int3")
    assert "CPU int4 kernel" in unsupported_reason("lab", torch.device("cuda"), "int4")  # no CUDA needed to ask


def test_lab_streaming_sends_early_chunks_that_add_up_to_the_full_decode(lab_fp32):
    n = 40
    req = SynthesisRequest.of(TEXTS[0], max_new_token=n, min_new_token=n, sampling=Sampling(audio_seed=2))
    full = synthesize(lab_fp32, req)
    items = list(synthesize_stream(lab_fp32, req))
    chunks, final = items[:-1], items[-1]
    assert len(chunks) >= 3
    assert len(chunks[0].audio[0]) < samples_for_tokens(n) // 2  # the first chunk comes early
    joined = np.concatenate([c.audio[0] for c in chunks])
    assert len(joined) == samples_for_tokens(n) == len(final.audio[0])
    np.testing.assert_allclose(joined, full.audio[0], atol=1e-4)
    m = final.measurements
    assert m.ttfa_s is not None and m.ttfa_s < m.wall_s and m.stages.decoder_s > 0 and m.stages.vocoder_s > 0


def test_interrupt_stops_lab_generation(lab_fp32):
    req = SynthesisRequest.of(TEXTS[0], max_new_token=400, min_new_token=400)
    items = []
    for item in synthesize_stream(lab_fp32, req):
        items.append(item)
        if len(items) == 1:
            interrupt(lab_fp32)
    final = items[-1]
    assert final.measurements.interrupted
    assert final.measurements.tokens[0] < 100


CONVERSION_PROBE = """
import json, sys, torch
from chattts_lab.engines.lab import install_lab
from chattts_lab.engines.lab.model import release_freed_memory
from chattts_lab.trackers.measure import PeakMemory
from chattts_lab.models import LoadConfig, load_model
import psutil
rss = lambda: psutil.Process().memory_info().rss / 2**20
model = load_model(LoadConfig(model=sys.argv[1], precision="fp32", engine="stock", threads=1))  # GPT mmapped
layer_mb = sum(p.numel() * 4 for p in model.chat.gpt.gpt.layers[0].parameters()) / 2**20
release_freed_memory()
before = rss()
with PeakMemory(torch.device("cpu")) as mem:
    install_lab(model.chat, device=torch.device("cpu"), precision="int8", compile=False)
print(json.dumps({"overshoot": mem.peaks.rss_mb - max(before, rss()), "layer_mb": layer_mb}))
"""


def _conversion_overshoot(model_name: str) -> tuple[float, float]:
    """In a fresh process (no allocator history): peak RSS while installing lab int8 above both the RSS
    before and after it, and the size of one fp32 layer, in MB."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", CONVERSION_PROBE, model_name], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["overshoot"], result["layer_mb"]


@pytest.mark.slow
def test_full_size_int8_conversion_does_not_touch_the_whole_fp32_gpt():
    """Converting never holds much more than one fp32 layer beyond what it keeps. Only full size can tell:
    the tiny GPT is two layers (72 MB), and the overshoot of its conversion varied from 52 to 109 MB over
    twenty fresh processes, so no bound there separates one layer from the whole GPT. Full size: 71-85 MB
    measured against a 720 MB GPT (about 50 s, hence `-m slow`)."""
    overshoot, layer_mb = _conversion_overshoot("synthetic")
    assert overshoot < 2 * layer_mb + 64, (overshoot, layer_mb)  # the whole fp32 GPT would be ~720 MB


def test_weight_formats_approximate_fp32():
    torch.manual_seed(0)
    w, x = torch.randn(256, 128), torch.randn(3, 128)
    ref = x @ w.T
    fused = int8_kernels()
    for module, tol in [(FbgemmInt8Linear(w), 0.03), (WeightOnlyInt8Linear(w), 0.02)] + (
        [(Int4Linear(w), 0.15)] if int4_available() else []
    ) + ([(PackedInt8Linear(w, fused), 0.02), (PackedInt4Linear(w, fused), 0.15)] if fused is not None else []):
        err = (module(x).float() - ref).norm() / ref.norm()
        assert err < tol, (type(module).__name__, float(err))


def test_fake_cuda_weight_only_int8_path_runs_on_cpu_in_half_precision():
    """FAKE for CUDA (no GPU here): the weight-only int8 module CUDA uses, run on CPU in bf16."""
    torch.manual_seed(0)
    w, x = torch.randn(64, 32), torch.randn(2, 32)
    y = WeightOnlyInt8Linear(w)(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    assert (y.float() - x @ w.T).norm() / (x @ w.T).norm() < 0.03


def test_top_p_then_top_k_ranks_only_the_candidates_and_keeps_what_the_warpers_keep():
    """The sampler's top-P + top-K (ranking only the top-K) against transformers' warpers in ChatTTS's
    order, on rows where top-P cuts inside the top K, keeps more than K, or keeps only its minimum."""
    from transformers.generation import TopKLogitsWarper, TopPLogitsWarper

    from chattts_lab.engines.lab.sampler import Sampler

    torch.manual_seed(0)
    rows, vocab = 96, 626
    spread = torch.tensor([0.3, 1.0, 3.0, 10.0]).repeat_interleave(rows // 4)[:, None]  # flat to peaked rows
    logits = torch.randn(rows, vocab) * spread
    warpers = [TopPLogitsWarper(0.7, min_tokens_to_keep=3), TopKLogitsWarper(20, min_tokens_to_keep=3)]
    want = logits
    for w in warpers:
        want = w(None, want)
    sampler = Sampler(warpers, torch.ones(rows, 1), rows, vocab, eos=vocab - 1, min_new_token=0, manual_seed=None,
                      generator=torch.Generator(), history=torch.zeros(rows, 1, dtype=torch.long))
    assert len(sampler.steps) == 1  # the pair became one step
    got = sampler.steps[0](logits, 0)
    assert torch.equal(got.isinf(), want.isinf()) and torch.equal(got, want)
    kept = (~want.isinf()).sum(-1)
    assert kept.min() == 3 and kept.max() == 20 and ((kept > 3) & (kept < 20)).any()  # every case was exercised


def test_bf16_projections_decode_close_to_fp32(lab_fp32):
    """The decoder's and vocoder's ConvNeXt projections in bf16 against ChatTTS's fp32 ones (lab fp32 keeps those)."""
    import copy

    from chattts_lab.engines.lab.vocoder import Bf16Projection, convert_projections

    chat = lab_fp32.chat
    decoder, vocos = copy.deepcopy(chat.decoder), copy.deepcopy(chat.vocos)
    assert convert_projections(decoder) > 0 and convert_projections(vocos) > 0
    assert isinstance(vocos.head.out, torch.nn.Linear)  # the log-magnitude projection stays fp32
    assert not any(isinstance(m, Bf16Projection) for m in chat.decoder.modules())  # lab fp32: untouched
    torch.manual_seed(0)
    x = torch.randn(2, 768, 24)
    with torch.inference_mode():
        want = chat.vocos.decode(chat.decoder(x.clone()))
        got = vocos.decode(decoder(x.clone()))
    assert got.dtype == torch.float32
    assert (got - want).norm() / want.norm() < 2e-2


def test_lab_builds_the_dvae_only_when_a_voice_clip_is_encoded():
    """Under the lab engine ChatTTS's DVAE (voice-clip encoding only) is not resident after load; encoding a
    clip builds it from the checkpoint and gives stock's sample-audio code."""
    from chattts_lab.engines.lab.on_demand import OnDemand
    from chattts_lab.synthesis import encode_sample_audio

    clip = np.random.default_rng(0).standard_normal(12000).astype(np.float32) * 0.1
    unload_all()
    want = encode_sample_audio(load("stock"), clip, 24000)
    unload_all()
    model = load("lab", "int8")
    assert isinstance(model.chat.dvae, OnDemand) and not model.chat.dvae.built
    synthesize(model, SynthesisRequest.of(TEXTS[0], max_new_token=4, min_new_token=4))
    assert not model.chat.dvae.built  # synthesis never needed it
    assert encode_sample_audio(model, clip, 24000) == want and model.chat.dvae.built
    unload_all()
