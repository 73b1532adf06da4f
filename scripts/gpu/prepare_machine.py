"""Before a GPU sweep: what the machine has, an independent check of its GPU's bandwidth, the checkpoint built.

    PYTHONPATH=. python scripts/gpu/prepare_machine.py --model synthetic --out machine.json   (scripts/gpu/sweep.sh runs it)

One process, so torch is imported once. Writes one JSON object (to a file: the libraries it imports may print); a
part that fails says why in it and the others still run (the sweep after it runs too, and its rows say what failed for each cell).

The bandwidth check shares no code with the sweep's own figure (chattts_lab.trackers.roofline: `torch.sum` over float32
between host clock reads, the best of five): triton's `do_bench` times an `amax` over int32 with CUDA events and
takes the median, clearing the L2 cache between calls. It also times a device-to-device copy (bytes read plus
bytes written), the figure KINDS.md quotes for the H200 (about 4.3 TB/s). The issue asks the two read figures
to agree within 15 %.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path

READ_BYTES = 2 * 2**30  # about 35 times an H200's 60 MB L2 cache
# What the bench needs that the device image lacks (carried as wheels: scripts/gpu/prepare_wheels.sh): module -> dist
CARRIED = {"ChatTTS": "chattts", "vocos": "vocos", "vector_quantize_pytorch": "vector-quantize-pytorch",
           "pybase16384": "pybase16384", "plotly": "plotly", "pydantic": "pydantic", "soundfile": "soundfile"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu/prepare_machine.py")
    p.add_argument("--model", default="synthetic", help="the sweep's --model (a synthetic one is built here)")
    p.add_argument("--out", required=True, help="where the JSON report goes")
    args = p.parse_args(argv)
    report = {"machine": _attempt(machine), "carried": carried_imports(), "bandwidth": _attempt(gpu_bandwidth),
              "checkpoint": _attempt(checkpoint, args.model)}
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


def _attempt(part, *args) -> dict:
    """The part's record, or why it failed: one missing piece must not hide what the others found."""
    try:
        return part(*args)
    except Exception as exc:  # any failure of a part becomes its record
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:800]}


def machine() -> dict:
    import onnxruntime
    import torch
    import transformers

    gpu = {}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "capability": f"{props.major}.{props.minor}",
               "memory_gb": round(props.total_memory / 2**30, 1), "bf16": torch.cuda.is_bf16_supported()}
    return {"status": "ok", "python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "gpu": gpu,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "onnxruntime_providers": onnxruntime.get_available_providers()}


def carried_imports() -> dict:
    """Each carried package's version where it imports, else the import's error."""
    found = {}
    for module, dist in CARRIED.items():
        try:
            importlib.import_module(module)
            found[module] = importlib.metadata.version(dist)
        except Exception as exc:  # a missing or broken wheel: the message names what to carry
            found[module] = f"not importable: {type(exc).__name__}: {exc}"[:300]
    return found


def gpu_bandwidth() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"status": "skipped", "reason": "no CUDA device here"}
    from triton.testing import do_bench

    x = torch.randint(-2**31, 2**31 - 1, (READ_BYTES // 4,), dtype=torch.int32, device="cuda")  # never zeros
    y = torch.empty_like(x)
    read_ms = do_bench(lambda: torch.amax(x), warmup=50, rep=300, return_mode="median")
    copy_ms = do_bench(lambda: y.copy_(x), warmup=50, rep=300, return_mode="median")
    return {"status": "ok", "device": torch.cuda.get_device_name(0), "read_gbps": READ_BYTES / read_ms / 1e6,
            "copy_gbps_read_plus_written": 2 * READ_BYTES / copy_ms / 1e6,
            "method": f"triton.testing.do_bench median (CUDA events, L2 cleared between calls): torch.amax over "
                      f"{READ_BYTES / 2**30:g} GiB int32, and a copy of it"}


def checkpoint(model: str) -> dict:
    from chattts_lab.models import resolve_source

    t0 = time.perf_counter()
    source = resolve_source(model)  # builds a synthetic checkpoint on first use (about 10 s for full size)
    return {"status": "ok", "model": model, "source": source.label, "path": str(source.path),
            "seconds": round(time.perf_counter() - t0, 1)}


if __name__ == "__main__":
    sys.exit(main())
