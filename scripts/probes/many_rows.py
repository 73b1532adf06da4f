"""One projection at a time, at many rows: the lab's int8 and int4 GEMMs at a kernel level against fbgemm's int8 and
torch's fp32 (MKL), in CPU time of one thread (time.thread_time, torch.set_num_threads(1)), best of `repeats`: the
machine is shared, and CPU time is what contention bends least. Run from the checkout, e.g. on an imitated AVX2 CPU:

    CHATTTS_LAB_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
    FBGEMM_ENABLE_INSTRUCTIONS=AVX2 python scripts/probes/many_rows.py avx2 1,8,30,64,256 [repeats] [--baseline SO]

--baseline: a kernels build of other sources (e.g. main's, from ~/.cache/torch_extensions/.../<name>/<name>.so),
timed beside this checkout's in the same rounds. The kernels take turns within each round (interleaved), so a
neighbour's burst bends them alike. Shapes (in -> out): the DVAE decoder's / Vocos' ConvNeXt projections
(512 -> 2048 and back) and GPT-like ones."""
import importlib.machinery
import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import FbgemmInt8Linear, PackedInt4Linear, PackedInt8Linear

SHAPES = [(512, 2048), (2048, 512), (768, 768), (768, 3072)]  # (in, out)


def best_ms(calls, x, repeats, clock=time.thread_time):
    """The best time of each call by `clock` (CPU time of the calling thread unless told), in interleaved rounds."""
    for call in calls:
        call(x)  # warm: packs, caches, fbgemm's first-call dispatch
    best = [float("inf")] * len(calls)
    for _ in range(repeats):
        for i, call in enumerate(calls):
            start = clock()
            call(x)
            best[i] = min(best[i], clock() - start)
    return [b * 1e3 for b in best]


def load_build(path: str):
    """A kernels build by its .so (its module is named as the file)."""
    loader = importlib.machinery.ExtensionFileLoader(Path(path).stem, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(Path(path).stem, loader))
    loader.exec_module(module)
    return module


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    baseline = load_build(sys.argv[sys.argv.index("--baseline") + 1]) if "--baseline" in sys.argv else None
    if baseline is not None:
        args = [a for a in args if a != sys.argv[sys.argv.index("--baseline") + 1]]
    level, rows = args[0], [int(r) for r in args[1].split(",")]
    repeats = int(args[2]) if len(args) > 2 else 20
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lab = kernels.load(level)
    names = [f"lab-int8 {level}", f"lab-int4 {level}", "fbgemm-int8", "MKL fp32"]
    names += ["baseline int8", "baseline int4"] if baseline is not None else []
    print("| in -> out | rows | " + " | ".join(f"{n} ms" for n in names) + " | int8 / fbgemm | int8 / fp32 |"
          + (" int8 / baseline |" if baseline is not None else ""))
    print("|---" * (len(names) + 4 + (baseline is not None)) + "|")
    for k, n in SHAPES:
        w = torch.randn(n, k) * 0.02
        calls = [PackedInt8Linear(w, lab), PackedInt4Linear(w, lab), FbgemmInt8Linear(w), lambda x, w=w: F.linear(x, w)]
        if baseline is not None:
            calls += [PackedInt8Linear(w, baseline), PackedInt4Linear(w, baseline)]
        with torch.inference_mode():
            for m in rows:
                t = best_ms(calls, torch.randn(m, k), repeats)
                ratios = [t[0] / t[2], t[0] / t[3]] + ([t[0] / t[4]] if baseline is not None else [])
                print(f"| {k} -> {n} | {m} | " + " | ".join(f"{v:.3f}" for v in t) + " | "
                      + " | ".join(f"{r:.2f}" for r in ratios) + " |", flush=True)


if __name__ == "__main__":
    main()
