"""What this CPU offers the lab's decode step, the dispatch level its kernels run at, and the kernel names a result
records.

The machines of this project differ (one with AVX-512, VNNI and bf16, another with AVX2 only), and the same
configuration runs different code on each. The lab's own C++ kernels (kernels.py) are built for one dispatch level
of `LEVELS`, the best this CPU runs, chosen once: AVX-512 VNNI, AVX-VNNI (256-bit `vpdpbusd`: Intel's desktop and
laptop chips since the 12th generation), AVX2 (with FMA and F16C: AMD Zen 1-3, Intel since Haswell), or portable
C++ (ARM64, where the compiler vectorises it with NEON; older x86). CHATTTS_LAB_ISA=<level> forces a lower level, so
that an AVX-512 machine builds, tests and measures the AVX2 code too. fbgemm's int8 GEMM (stock int8) dispatches by
itself to its AVX-512 VNNI, AVX-512 or AVX2 code. Every result names what ran, e.g. `lab-int8 avx2` or
`fbgemm-int8 avx512_vnni`.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from chattts_lab.trackers.env import this_cpu

# fbgemm's own dispatch order (fbgemmHasAvx512VnniSupport, then Avx512, then Avx2) and what each needs
_INT8_ISAS = (
    ("avx512_vnni", {"avx512_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("avx2", {"avx2", "fma"}),
)
# the levels FBGEMM_ENABLE_INSTRUCTIONS=<value> keeps fbgemm from (fbgemm reads it once, at its first GEMM)
_FBGEMM_CAPS = {"AVX2": ("avx512_vnni", "avx512"), "AVX512": ("avx512_vnni",)}


@dataclass(frozen=True)
class CpuFeatures:
    flags: frozenset  # the CPU's flags, as chattts_lab.trackers.env.this_cpu reads them

    @property
    def int8_isa(self) -> str | None:
        """The SIMD level fbgemm's int8 GEMM runs at here; None where it has only reference loops. fbgemm stays at
        or below FBGEMM_ENABLE_INSTRUCTIONS (AVX2, AVX512; how an AVX2 machine is imitated) when that is set."""
        capped = _FBGEMM_CAPS.get(os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").upper(), ())
        return next((name for name, needs in _INT8_ISAS if needs <= self.flags and name not in capped), None)

    @property
    def native_bf16(self) -> bool:
        """bf16 dot products in hardware (oneDNN's bf16 matmuls run natively rather than emulated), unless oneDNN is
        told to stay below them (ONEDNN_MAX_CPU_ISA, e.g. AVX2: then it emulates bf16, slower than fp32)."""
        capped = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
        return ("avx512_bf16" in self.flags or "amx_bf16" in self.flags) and (
            capped == "ALL" or "BF16" in capped or "AMX" in capped or "AVX10" in capped)


def detect() -> CpuFeatures:
    return CpuFeatures(this_cpu().flags)


@dataclass(frozen=True)
class KernelLevel:
    """One dispatch level of the lab's kernels: the ways to build it, each the CPU flags its code executes and the
    compiler flags that build it (the first whose flags this CPU has is used)."""

    name: str
    builds: tuple[tuple[frozenset, tuple[str, ...]], ...]

    def cflags(self, flags: frozenset) -> tuple[str, ...] | None:
        """The compiler flags that build this level for a CPU with `flags`, or None where it cannot run."""
        return next((cflags for needs, cflags in self.builds if needs <= flags), None)


_AVX2 = frozenset({"avx2", "fma", "f16c"})
_AVX2_FLAGS = ("-mavx2", "-mfma", "-mf16c")
_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
_AVX512_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq")
# Best first. The tuning is this CPU's (-mtune=native); the instructions are only the level's, never -march=native,
# which would let the compiler use AVX-512 in an AVX2 build on an AVX-512 machine and so test nothing of AVX2.
LEVELS = (
    KernelLevel("avx512_vnni", ((_AVX2 | _AVX512 | {"avx512_vnni"},
                                 (*_AVX2_FLAGS, *_AVX512_FLAGS, "-mavx512vnni", "-DLAB_ISA_AVX512_VNNI")),)),
    KernelLevel("avx_vnni", ((_AVX2 | {"avx_vnni"}, (*_AVX2_FLAGS, "-mavxvnni", "-DLAB_ISA_AVX_VNNI")),
                             # an AVX-512 VNNI CPU runs the same 256-bit vpdpbusd in its EVEX form: tests there
                             (_AVX2 | {"avx512vl", "avx512_vnni"},
                              (*_AVX2_FLAGS, "-mavx512vl", "-mavx512vnni", "-DLAB_ISA_AVX_VNNI")))),
    KernelLevel("avx2", ((_AVX2, (*_AVX2_FLAGS, "-DLAB_ISA_AVX2")),)),
    KernelLevel("portable", ((frozenset(), ("-DLAB_ISA_PORTABLE",)),)),
)
LEVEL_NAMES = tuple(level.name for level in LEVELS)
FORCE_ENV = "CHATTTS_LAB_ISA"


def tuning_flags() -> tuple[str, ...]:
    """Tune for this CPU without widening its instruction set (aarch64: -mcpu=native also enables NEON dotprod
    where the CPU has it, which the portable level's byte dot products vectorise to)."""
    return ("-mcpu=native",) if platform.machine() in ("aarch64", "arm64") else ("-mtune=native",)


def runnable_levels(features: CpuFeatures | None = None) -> tuple[str, ...]:
    """The levels this CPU can run, best first (portable always)."""
    flags = (features or detect()).flags
    x86 = platform.machine() in ("x86_64", "AMD64", "i686")
    return tuple(level.name for level in LEVELS if level.cflags(flags) is not None and (x86 or level.name == "portable"))


def kernel_level(features: CpuFeatures | None = None) -> str:
    """The level the lab's kernels are built for: the best this CPU runs, or the one CHATTTS_LAB_ISA names.

    A level the CPU cannot run is refused with the reason (its instructions would crash the process), not ignored.
    """
    runnable = runnable_levels(features)
    forced = os.environ.get(FORCE_ENV, "").strip().lower()
    if not forced or forced in ("auto", "native", "best"):
        return runnable[0]
    if forced not in LEVEL_NAMES:
        raise ValueError(f"{FORCE_ENV}={forced!r} is not a kernel level; choose one of {', '.join(LEVEL_NAMES)}")
    if forced not in runnable:
        raise ValueError(f"{FORCE_ENV}={forced}: this CPU cannot run that level; it runs {', '.join(runnable)}")
    return forced


def describe(level: str) -> str:
    """This CPU in the words of what its kernels can use, e.g. 'AVX2 without AVX-512'."""
    if level == "portable":
        return "ARM64" if platform.machine() in ("aarch64", "arm64") else "no AVX2"
    flags = detect().flags
    if "avx512f" in flags:
        return "AVX-512 with VNNI" if "avx512_vnni" in flags else "AVX-512 without VNNI"
    return "AVX2 with AVX-VNNI, without AVX-512" if "avx_vnni" in flags else "AVX2 without AVX-512"


def level_cflags(name: str, features: CpuFeatures | None = None) -> tuple[str, ...]:
    level = next(level for level in LEVELS if level.name == name)
    return (*level.cflags((features or detect()).flags), *tuning_flags())


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
