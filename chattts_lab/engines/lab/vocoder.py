"""ChatTTS's mel decoder and Vocos vocoder under lab int8/int4: their pointwise projections in bf16.

Both are stacks of ConvNeXt blocks whose two pointwise projections (the decoder's 512 -> 2048 -> 512,
Vocos's 512 -> 1536 -> 512, per frame) are nearly all of their work. Unlike a decode step they are
compute-bound (every weight is reused for every frame of every item), so their cost grows with the
batch: at batch 8 and 128 tokens they took about a quarter of a lab int8 call. On a CPU with bf16
dot-product instructions (avx512_bf16 or AMX) oneDNN's bf16 matmuls run them about twice as fast as
fp32, and hold half the bytes. Elsewhere bf16 is emulated and slower, so they stay fp32. Depthwise
convolutions, norms and the ISTFT stay fp32; the projections accumulate in fp32 and return fp32.

Only where the GPT is already int8/int4: lab fp32 keeps ChatTTS's decoder and vocoder as they are,
so its audio stays stock fp32's.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.engines.lab import cpu


class Bf16Projection(nn.Module):
    """An `nn.Linear` whose weight and bias are bf16; takes and returns fp32."""

    effective_dtype = "bfloat16"

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight, self.bias).to(x.dtype)


def bf16_projections_pay(device: torch.device) -> bool:
    """bf16 projections only where the CPU computes bf16 natively (elsewhere they run slower than fp32)."""
    return device.type == "cpu" and cpu.detect().native_bf16


def convert_projections(module: nn.Module) -> int:
    """Replace the `nn.Linear`s of every ConvNeXt block inside `module` by `Bf16Projection`s, in place;
    returns how many. (ChatTTS's and Vocos's blocks share the class name.) Vocos's output projection,
    whose log-magnitudes go through exp, stays fp32: a small share of the work, and bf16 rounding there
    would scale the audio by up to a few per cent."""
    converted = 0
    for block in [m for m in module.modules() if type(m).__name__ == "ConvNeXtBlock"]:
        for name, child in list(block.named_children()):
            if isinstance(child, nn.Linear):
                setattr(block, name, Bf16Projection(child))
                converted += 1
    if converted:
        module.effective_dtype = "bfloat16 projections, float32 convolutions"  # what precision.module_dtype reports
    return converted


def install_bf16_decoding(chat, device: torch.device) -> None:
    """The decoder's and vocoder's projections in bf16 where that pays here (the rows' dtype_decoder and
    dtype_vocos say whether they were converted)."""
    if bf16_projections_pay(device):
        with torch.no_grad():
            for module in (chat.decoder, chat.vocos):
                convert_projections(module)
