"""One projection at a time, at many rows: the lab's int8 and int4 GEMMs at a kernel level against fbgemm's int8 and
torch's fp32 (MKL), in CPU time of one thread (time.thread_time, torch.set_num_threads(1)), best of `repeats`: the
machine is shared, and CPU time is what contention bends least. Run from the checkout, e.g. on an imitated AVX2 CPU:

    CHATTTS_LAB_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
    FBGEMM_ENABLE_INSTRUCTIONS=AVX2 python scripts/probes/many_rows.py avx2 1,8,30,64,256 [repeats]

Shapes (in -> out): the DVAE decoder's / Vocos' ConvNeXt projections (512 -> 2048 and back) and GPT-like ones."""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import FbgemmInt8Linear, PackedInt4Linear, PackedInt8Linear

SHAPES = [(512, 2048), (2048, 512), (768, 768), (768, 3072)]  # (in, out)


def best_ms(call, x, repeats):
    call(x)  # warm: packs, caches, fbgemm's first-call dispatch
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        call(x)
        best = min(best, time.thread_time() - start)
    return best * 1e3


def main():
    level, rows = sys.argv[1], [int(r) for r in sys.argv[2].split(",")]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lab = kernels.load(level)
    print(f"| in -> out | rows | lab-int8 {level} ms | lab-int4 {level} ms | fbgemm-int8 ms | MKL fp32 ms "
          f"| int8 / fbgemm | int8 / fp32 |")
    print("|---|---|---|---|---|---|---|---|")
    for k, n in SHAPES:
        w = torch.randn(n, k) * 0.02
        int8, int4, fbgemm = PackedInt8Linear(w, lab), PackedInt4Linear(w, lab), FbgemmInt8Linear(w)
        with torch.inference_mode():
            for m in rows:
                x = torch.randn(m, k)
                t = [best_ms(f, x, repeats) for f in (int8, int4, fbgemm, lambda x: F.linear(x, w))]
                print(f"| {k} -> {n} | {m} | {t[0]:.3f} | {t[1]:.3f} | {t[2]:.3f} | {t[3]:.3f} "
                      f"| {t[0] / t[2]:.2f} | {t[0] / t[3]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
