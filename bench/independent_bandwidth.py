"""An independent check of a sweep's `mem_read_gbps`, sharing none of the sweep's code.

    python -m bench.independent_bandwidth --procs 2 --mib 1024 --repeats 5

`procs` separate processes each own one part of `mib` MiB (float64 ones) and sum it with numpy, all
starting together at a barrier; a round lasts from the first start to the last finish, and the median
of `repeats` rounds gives GB/s (1e9 bytes per second). The sweep reads one array from threads of its
own process; a figure that agrees from separate processes and separate code is the machine's, not
the method's. Expect agreement within the machine's noise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np


def _reader(nbytes: int, repeats: int, barrier, spans) -> None:
    data = np.ones(nbytes // 8)  # written once, so every page is mapped before timing
    data.sum()
    for _ in range(repeats):
        barrier.wait()
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process of the machine
        data.sum()
        spans.put((t0, time.perf_counter()))


def measure(procs: int, mib: int, repeats: int) -> dict:
    ctx = mp.get_context("spawn")  # fresh interpreters: no state shared with this one
    barrier, spans = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_reader, args=(mib * 2**20 // procs, repeats, barrier, spans))
               for _ in range(procs)]
    for w in workers:
        w.start()
    got = [spans.get(timeout=600) for _ in range(procs * repeats)]
    for w in workers:
        w.join()
    starts = sorted(got)
    rounds = [starts[i * procs:(i + 1) * procs] for i in range(repeats)]
    walls = [max(end for _, end in r) - min(start for start, _ in r) for r in rounds]
    return {"gbps": mib * 2**20 / statistics.median(walls) / 1e9, "procs": procs, "mib": mib, "walls_s": walls}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.independent_bandwidth")
    p.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count())
    p.add_argument("--mib", type=int, default=1024, help="array size; several times the last-level cache")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    if min(a.procs, a.mib, a.repeats) < 1:
        p.error("--procs, --mib and --repeats must be at least 1")
    print(json.dumps(measure(a.procs, a.mib, a.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
