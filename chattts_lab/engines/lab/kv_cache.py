"""The lab GPT's KV cache on the CPU: one tensor per layer for keys and one for values, [items, heads, slots, line].

fp32 (lab fp32) and bf16 hold a position's head_dim values as they are. int8 (lab int8 and int4 with fp32
activations) holds, per item, head and position, a *line*: head_dim int8 values, then their fp32 scale in 4 bytes
(value = int8 * scale, scale = max |value| / 127). Why int8: at 8 rows a decode step reads every row's whole cache
(about 2.4 ms of a 10 ms step at 100 positions on the Zen 4 VM, bound by memory); an int8 line is 68 bytes where bf16
takes 128. Why the scale inside the line: moving, zeroing or copying a position (continuous.py's row moves,
kernels.cpp's copy_behind) moves its scale with it, with no second tensor to keep in step.
"""

from __future__ import annotations

import torch

SCALE_BYTES = 4  # one fp32 scale after an int8 line's values


def allocate(items: int, heads: int, slots: int, head_dim: int, dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised cache (pages never written are never resident, so many slots are cheap)."""
    line = head_dim + SCALE_BYTES if dtype == torch.int8 else head_dim
    return torch.empty(items, heads, slots, line, dtype=dtype, device=device)


def write(cache: torch.Tensor, start: int, values: torch.Tensor, fused=None) -> None:
    """cache[:, :, start:start+S] = values [items, heads, S, head_dim] (quantized per line into an int8 cache, in one
    call of the lab's kernels `fused` where they are loaded: as torch ops, a prompt slice's 16 positions paid about
    2-3 ms for them)."""
    end = start + values.shape[2]
    if cache.dtype != torch.int8:
        cache[:, :, start:end] = values
        return
    if fused is not None and values.dtype == torch.float32:
        return fused.kv_store_int8(cache, start, values)
    head_dim = values.shape[-1]
    amax = values.float().abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    lines = cache[:, :, start:end]
    lines[..., :head_dim] = torch.round(values.float() / scale).to(torch.int8)
    _scales(lines, head_dim)[:] = scale


def read(cache: torch.Tensor, end: int, dtype: torch.dtype, fused=None) -> torch.Tensor:
    """Slots [0, end) as `dtype` values [items, heads, end, head_dim] (`fused` as for `write`)."""
    if cache.dtype != torch.int8:
        return cache[:, :, :end].to(dtype)
    if fused is not None:
        return fused.kv_load_int8(cache, end).to(dtype)
    lines = cache[:, :, :end]
    head_dim = cache.shape[-1] - SCALE_BYTES
    return (lines[..., :head_dim].to(torch.float32) * _scales(lines, head_dim)).to(dtype)


def _scales(lines: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The fp32 scale of each int8 line, a view [..., 1] into the cache (a line's stride is a multiple of 4 bytes)."""
    return lines[..., head_dim:].view(torch.float32)

