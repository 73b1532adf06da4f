"""The lab engine's C++ CPU kernels, built on first use with the local C++ compiler: the fused decode step's
glue (`kernels.cpp`) and, on AVX-512 VNNI CPUs, the int8 and int4 GEMMs and the one-call step (`int8_gemm.cpp`).

Optional by design: where there is no compiler (or ninja), where the build fails, or with
CHATTTS_LAB_KERNELS=off, `load()` returns None and the lab engine runs the same maths as torch ops.
The build is cached by torch under ~/.cache/torch_extensions (its name carries a hash of the source,
the torch version and the CPU's flags, because it is compiled for this CPU, and where that torch is installed:
ninja rebuilds a build whose include paths changed, so two environments sharing one name would rebuild it in
turn, a minute of compiling each time).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# kernels.cpp: the fused decode step's glue; int8_gemm.cpp: the int8 and int4 matrix multiplies for AVX-512 VNNI CPUs
SOURCES = [Path(__file__).with_name("kernels.cpp"), Path(__file__).with_name("int8_gemm.cpp")]
FUNCTIONS = ["simd", "rms_norm", "add_rms_norm", "silu_mul", "decode_attention", "fp32_linear_rows", "int8_isa",
             "int8_pack", "int8_linear", "int4_group", "int4_pack", "int4_linear", "decode_step_packed"]
# -march=native: the build is for this machine only (its cache name carries the CPU flags)
CFLAGS = ["-O3", "-march=native", "-fopenmp"]  # -fopenmp: at::parallel_for is inline OpenMP


def _build_name(source: str) -> str:
    cpu = _cpu_flags()
    where = Path(torch.__file__).parent  # the build's include paths
    key = hashlib.sha1(f"{source}{torch.__version__}{where}{cpu}{CFLAGS}".encode()).hexdigest()[:12]
    return f"chattts_lab_kernels_{key}"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def disabled_reason() -> str | None:
    if os.environ.get("CHATTTS_LAB_KERNELS", "on").lower() in ("off", "0", "false", "no"):
        return "fused kernels switched off (CHATTTS_LAB_KERNELS=off)"
    return None


@functools.cache
def load():
    """The compiled kernels module, or None (with the reason logged) where they cannot be built here."""
    reason = disabled_reason()
    if reason:
        log.info(reason)
        return None
    try:
        # torch warns at import about a missing CUDA toolkit, even for a CPU-only build: not news here
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        from torch.utils.cpp_extension import load_inline

        sources = [path.read_text() for path in SOURCES]
        log.info("loading the lab's fused CPU kernels (built first where this machine has no cached build: about a "
                 "minute)")
        return load_inline(name=_build_name("".join(sources)), cpp_sources=sources, functions=FUNCTIONS,
                           extra_cflags=CFLAGS, verbose=False)
    except Exception as exc:  # no compiler, no ninja, a failed build: the torch path computes the same
        log.warning("lab fused CPU kernels unavailable, using torch ops: %s: %s", type(exc).__name__,
                    str(exc).strip().splitlines()[-1] if str(exc).strip() else "")
        return None
