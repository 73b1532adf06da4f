"""ChatTTS's mel decoder and Vocos's backbone run time-major: (batch, time, channels) from their first ConvNeXt
block to their last, the same arithmetic as stock's in another memory layout.

Stock runs each ConvNeXt block's depthwise convolution on (B, C, T) and its norm and two projections on (B, T, C),
transposing twice a block: strided copies, a norm on a strided view, a residual added across layouts. In a streamed
chunk's decode with int8 projections, the copies and the depthwise convolutions in (B, C, T) were a fifth of the
call (docs/measurements/2026-12-04-decode-layout.md: 1.12-1.19x faster without them). Here the blocks
stay time-major throughout: the depthwise convolution runs as a channels-last 2-D convolution on the time-major
tensor itself (no copy), the norm and projections read it contiguously, and the layout changes twice a stack.

Installed by replacing `forward` on the two module instances (so ChatTTS's own `_decode_to_wavs`, and the stage
timers wrapped around it, stay as they are); `set_installed(chat, False)` restores stock's.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn


def depthwise(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv` (a depthwise, 'same'-padded Conv1d) applied to a time-major x (B, T, C); returns (B, T, C).

    (B, T, C) contiguous is (B, C, 1, T) in channels-last memory, where oneDNN convolves it without a copy."""
    (d,), (pad,), (k,) = conv.dilation, conv.padding, conv.kernel_size
    b, t, c = x.shape
    if d > 1 and t % d == 0 and pad == d * (k // 2):
        return _dilated_by_phase(x, conv)
    image = x.transpose(1, 2).unsqueeze(2)  # (B, C, 1, T), strides of channels-last: no copy
    weight = conv.weight.unsqueeze(2)  # (C, 1, 1, K)
    y = F.conv2d(image, weight, conv.bias, stride=1, padding=(0, conv.padding[0]), dilation=(1, conv.dilation[0]),
                 groups=conv.groups)
    return y.squeeze(2).transpose(1, 2).contiguous()  # contiguous already where oneDNN kept channels-last


def _dilated_by_phase(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """A dilation-d depthwise convolution as an undilated one over each of time's d phases: frame j*d + r meets only
    frames of phase r, d apart, so (B, T, C) viewed as (B, T/d, d, C) (no copy: channels-last (B, C, T/d, d)) is
    convolved down its T/d axis with the kernel as it is. The same sums in the same order; oneDNN's dilated
    channels-last kernel took 2.0 ms a call on AVX2 against 0.09 ms for this (the DVAE decoder's 12 blocks,
    docs/measurements/2026-12-05-outside-gpt-floor.md)."""
    return by_phase(x, conv, conv.padding[0])


def by_phase(x: torch.Tensor, conv: nn.Conv1d, pad: int) -> torch.Tensor:
    """Depthwise `conv` over each of time's phases (see _dilated_by_phase) of a time-major x (B, T, C), T a multiple
    of the dilation, padded with `pad` zeros at each end instead of the convolution's own padding (0: x brings its
    own context, as a streamed chunk's does): (B, T + 2 * (pad - conv.padding), C)."""
    (d,), (p,) = conv.dilation, conv.padding
    b, t, c = x.shape
    image = x.view(b, t // d, d, c).permute(0, 3, 1, 2)  # (B, C, T/d, d) in channels-last memory
    y = F.conv2d(image, conv.weight.unsqueeze(3), conv.bias, padding=(pad // d, 0), groups=conv.groups)
    return y.permute(0, 2, 3, 1).reshape(b, t + 2 * (pad - p), c)


def convnext_blocks(blocks, x: torch.Tensor, convolve=depthwise) -> torch.Tensor:
    """ChatTTS's or Vocos's ConvNeXt blocks (unconditioned) on a time-major x (B, T, C): what their forwards compute
    on x transposed, transposed back. `convolve(x, conv)` runs each block's depthwise convolution (a streamed chunk's
    carries its frames from the last chunk: engines/lab/chunk_decode.py)."""
    for block in blocks:
        y = block.norm(convolve(x, block.dwconv))
        y = block.pwconv2(block.act(block.pwconv1(y)))
        scale = block.weight if hasattr(block, "weight") else block.gamma  # ChatTTS's name, Vocos's
        if scale is not None:
            y.mul_(scale)
        x = y.add_(x)
    return x


def dvae_decode(dvae, inp: torch.Tensor, mode: str = "decode") -> torch.Tensor:
    """ChatTTS's `DVAE.forward` in decode mode without a quantizer (its mel decoder, `chat.decoder`): GPT hidden
    states (B, 768, T) to a mel spectrogram (B, 100, 2T)."""
    if mode != "decode" or dvae.vq_layer is not None:
        return type(dvae).forward(dvae, inp, mode)
    b, c, t = inp.shape
    frames = inp.view(b, 2, c // 2, t).permute(0, 2, 3, 1).flatten(2)  # each token's two frames, as stock
    decoder = dvae.decoder
    x = decoder.conv_in(frames).transpose(1, 2).contiguous()  # (B, 2T, hidden)
    x = convnext_blocks(decoder.decoder_block, x)
    x = F.linear(x, decoder.conv_out.weight.squeeze(-1))  # the 1x1 output convolution
    mel = dvae.out_conv(x.transpose(1, 2))
    return torch.mul(mel, dvae.coef, out=mel)


def backbone_forward(backbone, x: torch.Tensor, **kwargs) -> torch.Tensor:
    """Vocos's `VocosBackbone.forward` (mel (B, 100, F) to (B, F, dim)), unconditioned."""
    if backbone.adanorm:
        return type(backbone).forward(backbone, x, **kwargs)
    x = backbone.norm(backbone.embed(x).transpose(1, 2))
    return backbone.final_layer_norm(convnext_blocks(backbone.convnext, x))


def _targets(chat) -> list[tuple[nn.Module, object]]:
    return [(chat.decoder, dvae_decode), (chat.vocos.backbone, backbone_forward)]


def set_installed(chat, on: bool = True) -> None:
    """Run `chat`'s decoder and Vocos backbone time-major (on) or as stock (off)."""
    for module, forward in _targets(chat):
        if on:
            module.forward = types.MethodType(forward, module)
        else:
            module.__dict__.pop("forward", None)


def installed(chat) -> bool:
    return all("forward" in module.__dict__ for module, _ in _targets(chat))
