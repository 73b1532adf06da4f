"""ChatTTS's mel decoder and Vocos vocoder under lab int8/int4: their pointwise projections in int8 (or bf16).

Both are stacks of ConvNeXt blocks whose two pointwise projections (the decoder's 512 -> 2048 -> 512,
Vocos's 512 -> 1536 -> 512, per frame) are nearly all of their work: about 19 GFLOP for 128 tokens (256
frames). Unlike a decode step they are compute-bound (every weight is reused for every frame of every item),
so their cost grows with the frames. int8 is the only faster arithmetic on an AVX2 CPU, and with VNNI 2x bf16's:
one projection of 256 frames, one thread, Zen 4: fp32 7.6 ms, bf16 2.8, the lab's int8 (VNNI) 1.2; held to
AVX2: fp32 7.2, the lab's AVX2 int8 5.9-8.0 (then shaped for a decode step's few rows; its many-row tiles since
are 0.85-1.0x that: docs/measurements/2026-12-04-avx2-many-rows.md), fbgemm's int8 2.8 (not used: see
`many_rows_int8`). A streamed chunk's decode also reads every
projection weight once per call: 150 MB in fp32, 37 in int8.

So where the lab's own int8 GEMM runs at an x86 level, the projections are int8: weights per output channel,
activations quantized per frame (so a frame's audio does not depend on the frames decoded beside it), fp32 in
and out, the bias added in fp32. Elsewhere they are bf16 where the CPU computes bf16 natively (avx512_bf16 or
AMX), else fp32. Depthwise convolutions, norms, Vocos's output projection (its log-magnitudes go through exp)
and the ISTFT stay fp32. What the audio loses: docs/measurements/2026-12-04-decode-stages.md (random weights).

Only where the GPT is already int8/int4: lab fp32 keeps ChatTTS's decoder and vocoder as they are,
so its audio stays stock fp32's.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.engines.lab import cpu
from chattts_lab.engines.lab.linear import PackedInt8Linear, int8_kernels


class Bf16Projection(nn.Module):
    """An `nn.Linear` whose weight and bias are bf16; takes and returns fp32."""

    effective_dtype = "bfloat16"
    kernel = "bfloat16-matmul"

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight, self.bias).to(x.dtype)


class Int8Projection(nn.Module):
    """An `nn.Linear` as an int8 GEMM (`make_int8(weight)`: the lab's) plus its fp32 bias; fp32 in and
    out."""

    effective_dtype = "int8"

    def __init__(self, linear: nn.Linear, make_int8: Callable[[torch.Tensor], nn.Module]):
        super().__init__()
        self.project = make_int8(linear.weight.detach().float())
        self.kernel = self.project.kernel
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(x)
        return y if self.bias is None else y.add_(self.bias)


def many_rows_int8() -> Callable[[torch.Tensor], nn.Module] | None:
    """The lab's own int8 GEMM at this CPU's x86 level (AVX-512 VNNI, AVX-VNNI, AVX2), or None. Not fbgemm's,
    although on AVX2 it ran 256 frames 2-3x faster: it quantizes a call's activations with one scale, so a streamed
    chunk would not be what the same frames give decoded whole, nor a row what it gives decoded alone (1.1 % of the
    peak apart on tiny weights, against 1.6e-4 per frame). ARM's portable build is unmeasured here."""
    fused = int8_kernels()
    if fused is not None and fused.int8_isa() in ("avx512_vnni", "avx_vnni", "avx2"):
        return lambda weight: PackedInt8Linear(weight, fused)
    return None


def bf16_projections_pay(device: torch.device) -> bool:
    """bf16 projections only where the CPU computes bf16 natively (elsewhere they run slower than fp32)."""
    return device.type == "cpu" and cpu.detect().native_bf16


def projection_format(device: torch.device) -> Callable[[nn.Linear], nn.Module] | None:
    """What a ConvNeXt projection becomes here under int8/int4: int8 where an int8 GEMM has a SIMD path, else bf16
    where it is native, else None (it stays fp32)."""
    if device.type != "cpu":
        return None
    if (make_int8 := many_rows_int8()) is not None:
        return lambda linear: Int8Projection(linear, make_int8)
    return Bf16Projection if bf16_projections_pay(device) else None


def convert_projections(module: nn.Module, convert: Callable[[nn.Linear], nn.Module] = Bf16Projection) -> int:
    """Replace the `nn.Linear`s of every ConvNeXt block inside `module` by `convert(linear)`, in place; returns how
    many. (ChatTTS's and Vocos's blocks share the class name.) Vocos's output projection, whose log-magnitudes go
    through exp, stays fp32: a small share of the work, and rounding there would scale the audio by up to a few per
    cent."""
    converted = []
    for block in [m for m in module.modules() if type(m).__name__ == "ConvNeXtBlock"]:
        for name, child in list(block.named_children()):
            if isinstance(child, nn.Linear):
                setattr(block, name, convert(child))
                converted.append(getattr(block, name))
    if converted:  # what precision.module_dtype reports as the rows' dtype_decoder / dtype_vocos
        first = converted[0]
        module.effective_dtype = f"{first.effective_dtype} projections ({first.kernel}), float32 convolutions"
    return len(converted)


def install_quantized_decoding(chat, device: torch.device) -> None:
    """The decoder's and vocoder's projections in int8 or bf16 where that pays here (the rows' dtype_decoder and
    dtype_vocos say which, and on which kernel)."""
    convert = projection_format(device)
    if convert is not None:
        with torch.no_grad():
            for module in (chat.decoder, chat.vocos):
                convert_projections(module, convert)
