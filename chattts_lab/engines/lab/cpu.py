"""What this CPU offers the lab's decode step, and the kernel names a result records.

The machines of this project differ (one with AVX-512, VNNI and bf16, another with AVX2 only), and the
same configuration runs different code on each: fbgemm's int8 GEMM dispatches by itself to its AVX-512
VNNI, AVX-512 or AVX2 code (without AVX2 it only has slow reference loops), and the lab's fused C++
kernels are compiled for the machine they run on. The lab chooses where the choice is its own (int8
through its own VNNI GEMM on AVX-512 VNNI CPUs, else through fbgemm where fbgemm has a SIMD path, else
weight-only int8) and names what ran, e.g. `lab-int8 avx512_vnni` or `fbgemm-int8 avx2`, so a row says
which kernels its timings came from.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from chattts_lab.trackers.env import cpu_info

# fbgemm's own dispatch order (fbgemmHasAvx512VnniSupport, then Avx512, then Avx2) and what each needs
_INT8_ISAS = (
    ("avx512_vnni", {"avx512_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("avx2", {"avx2", "fma"}),
)


@dataclass(frozen=True)
class CpuFeatures:
    flags: frozenset  # /proc/cpuinfo flags, as chattts_lab.trackers.env reads them

    @property
    def int8_isa(self) -> str | None:
        """The SIMD level fbgemm's int8 GEMM runs at here; None where it has only reference loops."""
        return next((name for name, needs in _INT8_ISAS if needs <= self.flags), None)

    @property
    def amx(self) -> bool:
        return "amx_int8" in self.flags or "amx_bf16" in self.flags

    @property
    def native_bf16(self) -> bool:
        """bf16 dot products in hardware (oneDNN's bf16 matmuls run natively rather than emulated)."""
        return "avx512_bf16" in self.flags or "amx_bf16" in self.flags


@functools.cache
def detect() -> CpuFeatures:
    return CpuFeatures(frozenset(cpu_info()["flags"]))


def torch_capability() -> str:
    """The SIMD level torch's own CPU kernels dispatch to here (e.g. AVX512, AVX2, DEFAULT)."""
    import torch

    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return (get() if get else "unknown").lower()


def fbgemm_int8_kernel() -> str:
    """The name of fbgemm's int8 GEMM at the level it runs at here."""
    return f"fbgemm-int8 {detect().int8_isa or 'reference'}"


def float_matmul_kernel(dtype: str) -> str:
    """torch's float matmuls (MKL/oneDNN): bf16 runs natively only with avx512_bf16 or AMX."""
    native = "" if dtype != "bfloat16" or detect().native_bf16 else " (emulated)"
    return f"{dtype}-matmul {torch_capability()}{native}"
