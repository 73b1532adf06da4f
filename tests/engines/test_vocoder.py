"""The decoder's and vocoder's ConvNeXt projections in int8 under lab int8/int4 (engines/lab/vocoder.py): the audio
against ChatTTS's fp32 decode on the same hidden states, per int8 GEMM this CPU runs, and what the rows record.
Real ChatTTS decoder and Vocos on tiny synthetic weights."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from chattts_lab.engines.lab import cpu, time_major, vocoder
from chattts_lab.models import LoadConfig, load_model, unload_all
from tests.conftest import TINY, x86_64_only

# The least signal-to-error ratio of the int8 decode against fp32 (full-size random weights with every block
# weighed in: 32 dB on the lab's per-frame int8, 28 on fbgemm's per-call 7-bit activations, which the decoder does
# not use; bf16: 44). Tiny weights: 36 and 32.
INT8_SNR_DB = 25.0


@pytest.fixture(scope="module")
def fp32_decoding():
    """ChatTTS's fp32 decoder and Vocos (lab fp32 keeps them), their blocks weighed in: the checkpoint's layer scale
    (1e-6, ConvNeXt's initial value) would hide what the projections do to the audio."""
    unload_all()
    chat = load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1)).chat
    decoder, vocos = copy.deepcopy(chat.decoder), copy.deepcopy(chat.vocos)
    for block in [m for part in (decoder, vocos) for m in part.modules() if type(m).__name__ == "ConvNeXtBlock"]:
        scale = block.gamma if hasattr(block, "gamma") else block.weight
        scale.data.fill_(1.0)
    return decoder, vocos


def decode(decoder, vocos, hiddens: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return vocos.decode(decoder(hiddens.clone())).numpy()


def snr_db(want: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10((want ** 2).sum() / ((want - got) ** 2).sum()))


@x86_64_only
def test_int8_projections_decode_close_to_fp32(fp32_decoding):
    make_int8 = vocoder.many_rows_int8()
    if make_int8 is None:
        pytest.skip("the lab's kernels cannot be built here")
    decoder, vocos = (copy.deepcopy(m) for m in fp32_decoding)
    convert = lambda linear: vocoder.Int8Projection(linear, make_int8)  # noqa: E731
    assert vocoder.convert_projections(decoder, convert) == 2 and vocoder.convert_projections(vocos, convert) == 2
    assert isinstance(vocos.head.out, torch.nn.Linear)  # the log-magnitude projection stays fp32
    torch.manual_seed(0)
    hiddens = torch.randn(2, 768, 48)
    want, got = decode(*fp32_decoding, hiddens), decode(decoder, vocos, hiddens)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert INT8_SNR_DB < snr_db(want, got) < 90  # close, and int8 did run (fp32 rounding alone is ~140 dB)
    assert decoder.effective_dtype.startswith("int8 projections (lab-int8 ")


def test_the_time_major_decode_is_stock_s_in_another_layout(fp32_decoding):
    """The decoder and Vocos backbone run time-major (engines/lab/time_major.py): stock's audio within fp32 rounding,
    for rows of different lengths in one call; off again, stock's own forwards."""
    decoder, vocos = (copy.deepcopy(m) for m in fp32_decoding)
    chat = SimpleNamespace(decoder=decoder, vocos=vocos)
    torch.manual_seed(1)
    hiddens = torch.randn(3, 768, 37)
    hiddens[2, :, 20:] = 0  # a shorter row, zero-padded as _decode_to_wavs pads it
    want = decode(decoder, vocos, hiddens)
    time_major.set_installed(chat)
    assert time_major.installed(chat)
    got = decode(decoder, vocos, hiddens)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    time_major.set_installed(chat, False)
    assert not time_major.installed(chat) and "forward" not in decoder.__dict__


@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("frames", [1, 8, 37, 74])
def test_a_time_major_depthwise_convolution_is_the_conv1d_it_stands_for(frames, dilation):
    """time_major.depthwise on (B, T, C), dilated ones by phase where T allows (every d-th frame convolved
    undilated), else as one dilated convolution: what the Conv1d computes on (B, C, T)."""
    torch.manual_seed(frames + dilation)
    conv = torch.nn.Conv1d(16, 16, 7, padding=3 * dilation, dilation=dilation, groups=16)
    x = torch.randn(2, frames, 16)
    with torch.no_grad():
        want = conv(x.transpose(1, 2)).transpose(1, 2)
        got = time_major.depthwise(x.contiguous(), conv)
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_served_projections_say_what_ran():
    """Lab int8 records the decoder's and vocoder's projection format and kernel; lab fp32 keeps ChatTTS's fp32."""
    unload_all()
    model = load_model(LoadConfig(model=TINY, precision="int8", engine="lab", threads=1))
    eff = model.effective
    assert time_major.installed(model.chat)  # on CPUs, whatever the precision
    convert = vocoder.projection_format(torch.device("cpu"))
    if vocoder.many_rows_int8() is not None:
        assert eff["dtype_decoder"].startswith("int8 projections (") and eff["dtype_decoder"] == eff["dtype_vocos"]
    elif convert is not None:
        bf16 = "bfloat16 projections (bfloat16-matmul), float32 convolutions"
        assert eff["dtype_decoder"] == eff["dtype_vocos"] == bf16
    else:
        assert eff["dtype_decoder"] == "float32"
    unload_all()
    lab_fp32 = load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1))
    assert lab_fp32.effective["dtype_decoder"] == lab_fp32.effective["dtype_vocos"] == "float32"
    assert time_major.installed(lab_fp32.chat)
    unload_all()


def test_the_int8_gemm_for_many_frames_is_the_lab_s_at_every_x86_level(monkeypatch):
    """FAKE kernels: the lab's per-frame int8 GEMM at each x86 level it may be built for, none at the portable one."""
    class Fused:
        def __init__(self, isa):
            self.isa = isa

        def int8_isa(self):
            return self.isa

    monkeypatch.setattr(vocoder, "PackedInt8Linear", lambda weight, fused: ("lab", fused.isa))
    for isa in ("avx512_vnni", "avx_vnni", "avx2"):
        monkeypatch.setattr(vocoder, "int8_kernels", lambda isa=isa: Fused(isa))
        assert vocoder.many_rows_int8()(None) == ("lab", isa)
    for kernels in (lambda: Fused("portable"), lambda: None):
        monkeypatch.setattr(vocoder, "int8_kernels", kernels)
        assert vocoder.many_rows_int8() is None


def test_fbgemm_level_follows_its_instruction_cap(monkeypatch):
    """FAKE CPU flags: FBGEMM_ENABLE_INSTRUCTIONS (how an AVX2 machine is imitated) holds fbgemm, and its name."""
    vnni = cpu.CpuFeatures(frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}))
    monkeypatch.delenv("FBGEMM_ENABLE_INSTRUCTIONS", raising=False)
    assert vnni.int8_isa == "avx512_vnni"
    monkeypatch.setenv("FBGEMM_ENABLE_INSTRUCTIONS", "AVX2")
    assert vnni.int8_isa == "avx2"
    monkeypatch.setenv("FBGEMM_ENABLE_INSTRUCTIONS", "avx512")
    assert vnni.int8_isa == "avx512"
