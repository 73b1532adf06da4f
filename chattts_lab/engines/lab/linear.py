"""Weight formats for the lab engine's projections: float, int8 and int4, each a tiny module.

Every module here takes fp32 (or the compute dtype's) activations of shape [..., in] and says what it
computes in through `effective_dtype`, which `precision.module_dtype` reports. Builders take one fp32
weight at a time, so a caller can free each source weight as soon as it is converted (flat peak RSS).

int8 and int4 on CPU (activations quantized per call and row) run the lab's own packed GEMMs at the level this CPU
runs (AVX-512 VNNI, AVX-VNNI, AVX2 or portable C++: cpu.py, kernels.py). Where the kernels cannot be built (no
compiler, CHATTTS_LAB_KERNELS=off), int8 runs fbgemm's dynamic-quantized GEMM through the core C++ ops
`torch.ops.quantized.linear_prepack` / `linear_dynamic` (not the deprecated Python `torch.ao.quantization` API)
and int4 torch's int4 CPU kernel. Off CPU int8 is weight-only (gpt-fast's recipe: int8 weights scaled per output
channel, activations in the compute dtype).
"""

from __future__ import annotations

import functools
import logging
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.engines.lab import cpu

log = logging.getLogger(__name__)


class FloatLinear(nn.Module):
    """Float weights as torch holds them. On an AVX2 or AVX-512 CPU in fp32, a decode step's few rows (at most
    `FP32_ROWS_MAX`) go through the lab's own fp32 kernel (`kernels.cpp`'s fp32_linear_rows): torch's fp32 GEMV
    (MKL's in the PyPI build) read the weights at about 19 GB/s on a Zen 4 machine that reads 55-88, the lab's
    kernel at 80 (full-size GPT, one step's 80 projections, batch 1, 2 threads: 36 -> 9.5 ms; batch 8: 65 -> 29).
    A prompt's many rows stay with torch's GEMM."""

    FP32_ROWS_MAX = 8

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(weight.to(dtype).contiguous(), requires_grad=False)
        self.effective_dtype = str(dtype).replace("torch.", "")
        on_cpu = weight.device.type == "cpu"
        self.rows = fp32_rows_kernels() if on_cpu and dtype == torch.float32 and weight.shape[1] % 32 == 0 else None
        if self.rows is not None:
            self.kernel = f"lab-fp32-rows {self.rows.simd()}"
        else:
            self.kernel = cpu.float_matmul_kernel(self.effective_dtype) if on_cpu else f"{weight.device.type}-matmul"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rows is not None and x.dtype == torch.float32 and x.numel() <= self.FP32_ROWS_MAX * x.shape[-1]:
            return self.rows.fp32_linear_rows(x, self.weight)
        return F.linear(x, self.weight)


def fp32_rows_kernels():
    """The compiled kernels when their build has SIMD fp32 rows (AVX2 or AVX-512), else None."""
    from chattts_lab.engines.lab import kernels

    fused = kernels.load()
    return fused if fused is not None and fused.simd() != "scalar" else None


def per_channel_int8(weight: torch.Tensor, rows_per_chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: weight ~= q * scales[:, None].

    A chunk of rows at a time, so quantizing a large table (the 65 MB text embedding) holds a few MB of
    float temporaries rather than two more copies of the table (the process's peak RSS counts them).
    """
    q = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scales = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, weight.shape[0], rows_per_chunk):
        w = weight[start : start + rows_per_chunk].float()
        s = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        q[start : start + rows_per_chunk] = torch.round(w / s[:, None]).clamp_(-127, 127)
        scales[start : start + rows_per_chunk] = s
    return q, scales


@functools.cache
def fbgemm_available() -> bool:
    """True where the fbgemm int8 ops exist and work; if a torch upgrade drops them, int8 falls back to
    weight-only int8 (slower on CPU, same results within rounding)."""
    if not any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm")):
        return False
    try:
        FbgemmInt8Linear(torch.ones(8, 8))(torch.ones(1, 8))
        return True
    except (RuntimeError, AttributeError, NotImplementedError) as exc:
        log.warning("fbgemm int8 ops unavailable (%s); lab int8 uses weight-only int8", exc)
        return False


class FbgemmInt8Linear(nn.Module):
    """int8 weights, int8 dynamic activations, fp32 in/out: fbgemm's VNNI GEMM (CPU)."""

    effective_dtype = "int8"

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.kernel = cpu.fbgemm_int8_kernel()
        q, scales = per_channel_int8(weight)
        zeros = torch.zeros(scales.numel(), dtype=torch.long)
        with warnings.catch_warnings():
            # torch warns that quantized tensor *creation* is deprecated; prepack still needs one, and
            # fbgemm_available() falls back to weight-only int8 the day it is gone.
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(q, scales.double(), zeros, 0)
            self.packed = torch.ops.quantized.linear_prepack(qweight, None)
        self.out_features = weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, as stock's quantize_dynamic, so no int16 saturation in the GEMM
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)


class PackedInt8Linear(nn.Module):
    """int8 weights, int8 dynamic activations, fp32 in/out: the lab's own packed GEMM (gemm_*.cpp) at this CPU's
    level.

    One packed copy of the weights (fbgemm keeps a second, unpacked one), every weight byte read once per call
    whatever the batch; per-row 8-bit activations. Full-size GPT, one decode step's projections, 2 threads,
    AVX-512 VNNI: fbgemm read the weights at about 20 GB/s, this at about 28 (batch 1; the machine reads ~33).
    """

    effective_dtype = "int8"

    def __init__(self, weight: torch.Tensor, fused):
        super().__init__()
        self.kernel = f"lab-int8 {fused.int8_isa()}"
        self.fused = fused
        q, scales = per_channel_int8(weight)
        self.out_features = weight.shape[0]
        packed, sums = fused.int8_pack(q)
        del q
        self.register_buffer("packed", packed)
        self.register_buffer("sums", sums)
        self.register_buffer("scales", F.pad(scales, (0, sums.numel() - scales.numel())))

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What `int8_linear` (and `decode_step_packed`, per projection) takes besides x: packed, sums, scales."""
        return self.packed, self.sums, self.scales

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.int8_linear(x.float(), *self.tensors, self.out_features)


class PackedInt4Linear(nn.Module):
    """int4 weights (asymmetric: a scale and a minimum per output row and group of 128 inputs), int8 dynamic
    activations, fp32 in/out: the lab's own packed GEMM at this CPU's level (gemm_*.cpp's int4). A decode step reads
    about half the bytes of int8's, which torch's int4 CPU kernel (bf16 activations) did not turn into a faster step."""

    effective_dtype = "int4"

    def __init__(self, weight: torch.Tensor, fused):
        super().__init__()
        self.kernel = f"lab-int4 {fused.int8_isa()}"
        self.fused = fused
        u, scales, mins = per_group_uint4(weight, fused.int4_group())
        self.out_features = weight.shape[0]
        packed, group_scales, group_mins = fused.int4_pack(u, scales, mins)
        del u
        self.register_buffer("packed", packed)
        self.register_buffer("group_scales", group_scales)
        self.register_buffer("group_mins", group_mins)

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What `int4_linear` (and `decode_step_packed`, per projection) takes besides x."""
        return self.packed, self.group_scales, self.group_mins

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.int4_linear(x.float(), *self.tensors, self.out_features)


def per_group_uint4(weight: torch.Tensor, group: int, rows_per_chunk: int = 1024):
    """Asymmetric 4-bit per output row and group of `group` inputs: weight ~= u * scales + mins, u in [0, 15]
    (uint8). Returns (u [N, K], scales [N, K / group], mins [N, K / group])."""
    n, k = weight.shape
    u = torch.empty(n, k, dtype=torch.uint8, device=weight.device)
    scales = torch.empty(n, k // group, dtype=torch.float32, device=weight.device)
    mins = torch.empty_like(scales)
    for start in range(0, n, rows_per_chunk):
        g = weight[start : start + rows_per_chunk].float().reshape(-1, k // group, group)
        lo, hi = g.amin(-1), g.amax(-1)
        s = (hi - lo).clamp(min=1e-8) / 15.0
        u[start : start + rows_per_chunk] = torch.round((g - lo[..., None]) / s[..., None]).clamp_(0, 15).reshape(-1, k)
        scales[start : start + rows_per_chunk], mins[start : start + rows_per_chunk] = s, lo
    return u, scales, mins


def int8_kernels():
    """The compiled kernels (with the lab's int8 and int4 GEMMs at this CPU's level), or None where they cannot be
    built here."""
    from chattts_lab.engines.lab import kernels

    return kernels.load()


class Int8Rows(nn.Module):
    """A float matrix held as int8 rows with a float32 scale per row (`weight` ~= int8 * scales[:, None])."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        q, scales = per_channel_int8(weight)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scales)


class WeightOnlyInt8Linear(Int8Rows):
    """int8 weights scaled per output channel; activations stay in the compute dtype (CUDA, MPS)."""

    effective_dtype = "int8"
    kernel = "weight-only-int8"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype)) * self.scales.to(x.dtype)


class Int8Embedding(Int8Rows):
    """An embedding table as int8 rows with a float32 scale per row; looks rows up as float32."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = ids.to(self.weight.device)
        return (F.embedding(rows, self.weight).float() * self.scales[rows, None]).to(ids.device)


INT4_GROUP = 64


def int4_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu"
    )


class Int4Linear(nn.Module):
    """Asymmetric int4 weights in groups of 64 along the input, bf16 activations (CPU kernel)."""

    effective_dtype = "int4"

    def __init__(self, weight: torch.Tensor, group: int = INT4_GROUP):
        super().__init__()
        self.kernel = f"int4pack-bf16 {cpu.torch_capability()}"
        w = weight.float()
        n, k = w.shape
        g = w.reshape(n, k // group, group)
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        scales = ((hi - lo).clamp(min=1e-8) / 15.0)
        q = torch.round((g - lo) / scales).clamp(0, 15).to(torch.int32).reshape(n, k)
        zeros = lo + 8 * scales  # the kernel computes (q - 8) * scale + zero
        self.group = group
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))
        # [k // group, n, 2]: scale and zero per group and output channel
        sz = torch.stack([scales.squeeze(-1), zeros.squeeze(-1)], -1).transpose(0, 1).contiguous()
        self.register_buffer("scales_zeros", sz.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, shape[-1]).to(torch.bfloat16), self.packed, self.group, self.scales_zeros
        )
        return y.reshape(*shape[:-1], -1).to(x.dtype)


def make_linear(weight: torch.Tensor, precision: str, device: torch.device, compute_dtype: torch.dtype) -> nn.Module:
    """One projection in the lab's format for this precision and device."""
    weight = weight.to(device)
    if precision == "int8":
        if device.type == "cpu" and weight.shape[1] % 16 == 0 and (fused := int8_kernels()) is not None:
            return PackedInt8Linear(weight, fused)
        # no lab kernels here: fbgemm only where it has a SIMD path (its reference loops lose to weight-only int8)
        if device.type == "cpu" and cpu.detect().int8_isa and fbgemm_available():
            return FbgemmInt8Linear(weight)
        return WeightOnlyInt8Linear(weight)
    if precision == "int4":
        if device.type == "cpu" and (fused := int8_kernels()) is not None and weight.shape[1] % fused.int4_group() == 0:
            return PackedInt4Linear(weight, fused)
        return Int4Linear(weight)
    return FloatLinear(weight, compute_dtype)
