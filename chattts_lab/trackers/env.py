"""The environment a result was measured in: hardware, software and code version.

Captured once per sweep and stored with it, so results from different machines can be compared
knowing what differs. Nothing here loads a model; importing torch is the heaviest step.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

# CPU flags that change which kernels run (bf16/int8 paths in oneDNN and fbgemm).
FLAGS_THAT_MATTER = (
    "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
    "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile", "asimd", "sve",
)
PACKAGES = ("torch", "torchaudio", "chattts", "transformers", "numpy", "vocos", "gradio")
REPO_ROOT = Path(__file__).resolve().parents[2]


def usable_cores() -> int:
    """Cores this process may run on: the affinity mask (containers, taskset), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity mask
        return os.cpu_count() or 1


def load_average() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none: Windows)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else None


@dataclass(frozen=True)
class Cpu:
    model: str
    flags: frozenset  # every flag the OS lists for it (/proc/cpuinfo's flags; ARM64's Features)


@functools.cache
def this_cpu() -> Cpu:
    """This machine's CPU, read once per process: the one reader of /proc/cpuinfo, whose flags decide which kernels
    run (the lab's dispatch level, fbgemm's, its kernels' build name) and what a result records of its machine."""
    model, flags = platform.processor() or platform.machine(), frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        model = m.group(1).strip() if m else model
        f = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
        flags = frozenset(f.group(1).split()) if f else flags
    except OSError:
        if sys.platform == "darwin":
            model = _run(["sysctl", "-n", "machdep.cpu.brand_string"]) or model
    return Cpu(model, flags)


def cpu_info() -> dict:
    cpu = this_cpu()
    return {
        "model": cpu.model,
        "arch": platform.machine(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": usable_cores(),
        "flags": [f for f in FLAGS_THAT_MATTER if f in cpu.flags],
    }


def gpu_info() -> list[dict]:
    import torch

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({
                "index": i, "name": p.name, "memory_gb": round(p.total_memory / 2**30, 2),
                "capability": f"{p.major}.{p.minor}", "bf16": bool(torch.cuda.is_bf16_supported()),
            })
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        gpus.append({"index": 0, "name": "Apple MPS", "memory_gb": None})
    return gpus


def blas_info() -> dict:
    import torch

    config = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", config)
    return {
        "blas": m.group(1) if m else "unknown",
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "quantized_engines": [e for e in torch.backends.quantized.supported_engines if e != "none"],
        "cuda_build": torch.version.cuda,
        "parallel_backend": _parallel_backend(torch.__config__.parallel_info()),
        "cpu_capability": _cpu_capability(),  # the SIMD level torch's own kernels dispatch to
    }


def _parallel_backend(info: str) -> str:
    m = re.search(r"ATen parallel backend:\s*(.+)", info)
    return m.group(1).strip() if m else "unknown"


def _cpu_capability() -> str | None:
    import torch

    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return get() if get else None


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(root: Path = REPO_ROOT) -> dict:
    commit = _run(["git", "-C", str(root), "rev-parse", "HEAD"])
    dirty = _run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(dirty) if commit else None}


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def capture_environment() -> dict:
    """Everything about this machine and software that a timing depends on."""
    mem = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "platform": platform.platform(),
        "cpu": cpu_info(),
        "ram_gb": round(mem.total / 2**30, 2),
        "gpus": gpu_info(),
        "versions": versions(),
        "blas": blas_info(),
        "git": git_info(),
        "load_avg": list(load_average() or ()) or None,
    }


def summary(env: dict) -> str:
    """One line naming the machine, for tables that compare machines."""
    cpu = env.get("cpu", {})
    gpus = ", ".join(g["name"] for g in env.get("gpus") or []) or "no GPU"
    torch_v = env.get("versions", {}).get("torch")
    return f"{cpu.get('model', '?')} x{cpu.get('usable_cores', '?')}, {env.get('ram_gb', '?')} GB, {gpus}, torch {torch_v}"


# Parts of an environment that change from moment to moment, not with the machine or its software.
_TRANSIENT = ("load_avg",)


def fingerprint(env: dict) -> str:
    """12 hex digits naming a machine with its software: equal for two rows measured on the same setup."""
    stable = {k: v for k, v in env.items() if k not in _TRANSIENT}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:12]
