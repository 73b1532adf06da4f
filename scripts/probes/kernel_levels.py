"""One decode step's 80 GPT projections at full ChatTTS size (20 layers of distinct random weights, so they come from
memory as in a real step), per kernel and dispatch level, in interleaved rounds; medians, with the machine's own read
bandwidth measured between rounds. Run from the checkout:

    python scripts/probes/kernel_levels.py avx512_vnni,avx2 1,8 int8,int4,fp32,fbgemm,torch-fp32 [threads]

Levels this CPU cannot run are refused (chattts_lab.engines.lab.cpu). fbgemm and torch run at their own levels
(fbgemm reads /proc/cpuinfo; torch follows ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS)."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch
import torch.nn.functional as F

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import FbgemmInt8Linear, per_channel_int8, per_group_uint4

levels, rows, kinds = sys.argv[1].split(","), [int(r) for r in sys.argv[2].split(",")], sys.argv[3].split(",")
torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
SHAPES = [(2304, 768), (768, 768), (6144, 768), (768, 3072)] * 20  # qkv, o, gate_up, down of 20 layers
torch.manual_seed(0)
calls, nbytes = {}, {}


def weights():
    return [torch.randn(n, k) * 0.02 for n, k in SHAPES]


def add(name, call, size):
    calls[name], nbytes[name] = call, size


for level in levels:
    lab = kernels.load(level)
    if "int8" in kinds:
        packs = []
        for w in weights():
            q, s = per_channel_int8(w)
            p, sums = lab.int8_pack(q)
            packs.append((w.shape[1], p, sums, F.pad(s, (0, sums.numel() - s.numel())), w.shape[0]))
        add(f"lab-int8 {level}", lambda xs, k=lab, ps=packs: [k.int8_linear(xs[kk], *rest) for kk, *rest in ps],
            sum(p[1].numel() + 8 * p[2].numel() for p in packs))
    if "int4" in kinds:
        packs = []
        for w in weights():
            packs.append((w.shape[1], *lab.int4_pack(*per_group_uint4(w, lab.int4_group())), w.shape[0]))
        add(f"lab-int4 {level}", lambda xs, k=lab, ps=packs: [k.int4_linear(xs[kk], *rest) for kk, *rest in ps],
            sum(p[1].numel() + 4 * (p[2].numel() + p[3].numel()) for p in packs))
    if "fp32" in kinds and lab.simd() != "scalar":
        ws = weights()
        add(f"lab-fp32-rows {level}", lambda xs, k=lab, ws=ws: [k.fp32_linear_rows(xs[w.shape[1]], w) for w in ws],
            sum(w.numel() * 4 for w in ws))
if "fbgemm" in kinds:
    mods = [(w.shape[1], FbgemmInt8Linear(w)) for w in weights()]
    add("fbgemm-int8", lambda xs: [m(xs[k]) for k, m in mods], sum(n * k for n, k in SHAPES))
if "torch-fp32" in kinds:
    ws = weights()
    add("torch-fp32", lambda xs: [F.linear(xs[w.shape[1]], w) for w in ws], sum(w.numel() * 4 for w in ws))

big = torch.empty(256 * 2**20 // 4).uniform_()


def read_gbs() -> float:  # what this machine reads with these threads: a 256 MB sum
    t = time.perf_counter()
    big.sum()
    return big.numel() * 4 / (time.perf_counter() - t) / 1e9


for m in rows:
    xs = {768: torch.randn(m, 768), 3072: torch.randn(m, 3072)}
    times, reads = {name: [] for name in calls}, []
    for call in calls.values():
        call(xs)
    for _ in range(7):
        reads.append(read_gbs())
        for name, call in calls.items():
            t = time.perf_counter()
            call(xs)
            times[name].append(time.perf_counter() - t)
    floor = statistics.median(reads)
    print(f"{m} row(s): this machine reads {floor:.1f} GB/s (256 MB sum, median of 7)")
    for name in calls:
        ms = statistics.median(times[name]) * 1e3
        gbs = nbytes[name] / ms / 1e6
        print(f"  {name:24s} {ms:7.2f} ms  {gbs:5.1f} GB/s of weights  {gbs / floor:.2f} of the read floor  "
              f"(spread {min(times[name]) * 1e3:.2f}-{max(times[name]) * 1e3:.2f} ms)")
