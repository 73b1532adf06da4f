"""Variants of the lab's kernel source side by side in one process: one decode step's 80 GPT projections (the shapes
of kernel_levels.py), int8 and int4, in interleaved rounds, so that a constant's effect is read against the
machine's own minute-to-minute swings rather than across separate processes. Each variant is the translation unit
passed through one `sed` expression (empty: unchanged); each builds once (cached like the lab's own builds). Run from
the checkout:

    python scripts/probes/kernel_variants.py avx2 1,8 25 base= \\
        far='s/PREFETCH_AHEAD = 192/PREFETCH_AHEAD = 384/'

(docs/measurements/2026-12-06-avx2-only-zen4.md)"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import PackedInt4Linear, PackedInt8Linear

SHAPES = [(2304, 768), (768, 768), (6144, 768), (768, 3072)] * 20  # qkv, o, gate_up, down of 20 layers
SOURCE = kernels.translation_unit()  # as checked out: every variant is made from it


def build(level: str, sed_expression: str):
    """The kernels module at `level` built from the translation unit after `sed_expression`."""
    source = SOURCE
    if sed_expression:
        edited = subprocess.run(["sed", sed_expression], input=source, capture_output=True, text=True,
                                check=True).stdout
        if edited == source:
            sys.exit(f"{sed_expression!r} changes nothing in the kernels' source")
        source = edited
    kernels.translation_unit = lambda: source
    kernels._load.cache_clear()
    return kernels.load(level)


def step_calls(lab, weights) -> dict:
    """One step's projections through `lab` as the engine packs them, int8 and int4, as callables of {K: x}."""
    int8 = [(w.shape[1], PackedInt8Linear(w, lab)) for w in weights]
    int4 = [(w.shape[1], PackedInt4Linear(w, lab)) for w in weights]
    return {"int8": lambda xs: [m(xs[k]) for k, m in int8], "int4": lambda xs: [m(xs[k]) for k, m in int4]}


def main():
    level, rows, rounds = sys.argv[1], [int(r) for r in sys.argv[2].split(",")], int(sys.argv[3])
    torch.set_num_threads(2)
    torch.manual_seed(0)
    weights = [torch.randn(n, k) * 0.02 for n, k in SHAPES]
    calls = {}
    for name, expression in (a.split("=", 1) for a in sys.argv[4:]):
        for kind, call in step_calls(build(level, expression), weights).items():
            calls[f"{name} {kind}"] = call
    for m in rows:
        xs = {768: torch.randn(m, 768), 3072: torch.randn(m, 3072)}
        times = {name: [] for name in calls}
        for call in calls.values():
            call(xs)
        for _ in range(rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call(xs)
                times[name].append(time.perf_counter() - start)
        print(f"{m} row(s), {level}, median of {rounds} interleaved rounds (best):")
        for name, ts in times.items():
            print(f"  {name:16s} {statistics.median(ts) * 1e3:7.2f} ms  ({min(ts) * 1e3:.2f})")


if __name__ == "__main__":
    main()
