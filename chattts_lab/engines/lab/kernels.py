"""The lab engine's C++ CPU kernels, built on first use with the local C++ compiler, for one dispatch level
(cpu.py's LEVELS: avx512_vnni, avx_vnni, avx2, portable): the fused decode step's glue and fp32 rows
(`kernels.cpp`), ChatTTS's logits chain (`sampling.cpp`), the packed int8 and int4 GEMMs (`gemm_formats.cpp`,
one file per level: `gemm_avx512.cpp`, `gemm_avx2.cpp`, `gemm_portable.cpp`) and the one-call step
(`int8_gemm.cpp`). The sources are one translation unit, in SOURCES' order.

`load()` builds the level this CPU runs best (or the one CHATTTS_LAB_ISA forces); `load(level)` any level the CPU
runs, so tests compare every level with the same reference in one process.

Optional by design: where there is no compiler (or ninja), where the build fails, or with
CHATTTS_LAB_KERNELS=off, `load()` returns None and the lab engine runs the same maths as torch ops.
The build is cached by torch under ~/.cache/torch_extensions, its one source file under ~/.cache/chattts_lab/kernels
(its name carries a hash of the source, the torch version, the level's compiler flags and the CPU's model and flags
(trackers.env.this_cpu), because it is compiled for this CPU, and where that torch is installed: ninja rebuilds a
build whose include paths changed, so two environments sharing one name would rebuild it in turn, about 20 s of
compiling each time).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

from chattts_lab.engines.lab import cpu
from chattts_lab.synthetic import default_cache_dir
from chattts_lab.trackers.env import this_cpu

log = logging.getLogger(__name__)

# one translation unit, in this order: the glue first (the GEMM files use its helpers), the step last
SOURCES = [Path(__file__).with_name(name) for name in
           ("kernels.cpp", "sampling.cpp", "gemm_formats.cpp", "gemm_pack.cpp", "gemm_portable.cpp",
            "gemm_avx512.cpp", "gemm_avx2.cpp", "int8_gemm.cpp")]
FUNCTIONS = ["simd", "rms_norm", "add_rms_norm", "silu_mul", "decode_attention", "fp32_linear_rows", "int8_isa",
             "int8_pack", "int8_linear", "int8_linear_portable", "int4_group", "int4_pack", "int4_linear",
             "int4_linear_portable", "decode_step_packed", "copy_behind", "kv_store_int8", "kv_load_int8",
             "sampling_filter"]
CFLAGS = ["-O3", "-fopenmp"]  # -fopenmp: at::parallel_for is inline OpenMP; the level adds its own (cpu.py)


def translation_unit() -> str:
    """SOURCES as one file, with the Python bindings of FUNCTIONS at the end. Not torch's load_inline: it includes
    <torch/extension.h>, whose C++ frontend doubled each level's build (kernels.cpp includes ATen alone)."""
    bindings = "\n".join(f'  m.def("{f}", torch::wrap_pybind_function({f}), "{f}");' for f in FUNCTIONS)
    sources = "\n".join(path.read_text() for path in SOURCES)
    return f"{sources}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{bindings}\n}}\n"


def _written(name: str, source: str) -> Path:
    """The translation unit as a file named for its build. Rewritten only when it differs, and atomically: ninja
    rebuilds what is newer than its build, and processes that start together may write it at once."""
    path = default_cache_dir() / "kernels" / f"{name}.cpp"
    if not path.is_file() or path.read_text() != source:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)
    return path


def _build_name(source: str, level: str, cflags: list[str]) -> str:
    where = Path(torch.__file__).parent  # the build's include paths
    machine = this_cpu()  # -mtune=native tunes for this CPU: another model or flag set builds its own
    cpu_key = f"{machine.model} {' '.join(sorted(machine.flags))}"
    key = hashlib.sha1(f"{source}{torch.__version__}{where}{cpu_key}{cflags}".encode()).hexdigest()[:12]
    return f"chattts_lab_kernels_{level}_{key}"


def disabled_reason() -> str | None:
    if os.environ.get("CHATTTS_LAB_KERNELS", "on").lower() in ("off", "0", "false", "no"):
        return "fused kernels switched off (CHATTTS_LAB_KERNELS=off)"
    return None


def unbuildable_reason() -> str | None:
    """Why no kernels can be built here without trying (switched off, no C++ compiler or ninja), else None."""
    if disabled_reason():
        return disabled_reason()
    if not shutil.which(os.environ.get("CXX", "c++")) or not shutil.which("ninja", path=_with_venv_bin()):
        return "no C++ compiler or ninja on this machine"
    return None


def buildable() -> bool:
    return unbuildable_reason() is None


def _with_venv_bin() -> str:
    """PATH plus this interpreter's own bin folder, where pip puts ninja (torch finds it there too)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def load(level: str | None = None):
    """The compiled kernels module at `level` (default: cpu.kernel_level(), this CPU's best or the forced one), or
    None (with the reason logged) where they cannot be built here. A level this CPU cannot run raises ValueError."""
    if level is None:
        level = cpu.kernel_level()
    elif level not in cpu.runnable_levels():
        raise ValueError(f"kernel level {level!r}: this CPU runs {', '.join(cpu.runnable_levels())}")
    return _load(level)


@functools.cache
def _load(level: str):
    reason = disabled_reason()
    if reason:
        log.info(reason)
        return None
    cflags = [*CFLAGS, *cpu.level_cflags(level)]
    try:
        # torch warns at import about a missing CUDA toolkit, even for a CPU-only build: not news here
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        from torch.utils.cpp_extension import load as build_and_load

        source = translation_unit()
        name = _build_name(source, level, cflags)
        log.info("loading the lab's CPU kernels at level %s (built first where this machine has no cached build: "
                 "about 20 s)", level)
        return build_and_load(name=name, sources=[str(_written(name, source))], extra_cflags=cflags, verbose=False)
    except Exception as exc:  # no compiler, no ninja, a failed build: the torch path computes the same
        log.warning("lab fused CPU kernels unavailable, using torch ops: %s: %s", type(exc).__name__,
                    str(exc).strip().splitlines()[-1] if str(exc).strip() else "")
        return None
