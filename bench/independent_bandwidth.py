"""An independent check of a sweep's `mem_read_gbps`, sharing none of the sweep's code.

    python -m bench.independent_bandwidth --procs 2 --mib 1024 --repeats 5

`procs` separate processes each own one part of `mib` MiB (float64 ones) and reduce it with numpy, all
starting together at a barrier; a round lasts from the first start to the last finish, and the median
of `repeats` rounds gives GB/s (1e9 bytes per second). Four reductions each read every byte once: a
float64 sum, a float64 max, a bitwise or of the same bytes as uint64, and the array's dot product with
itself (BLAS's ddot on one thread per process: each element is loaded once and used twice). Each is a
lower bound (numpy's float64 sum is held back by its chain of adds on a Zen 5 CPU, where its max and or read
about 38 GB/s a core and ddot about 42, like torch's sum), so the fastest counts, and all are reported. The
sweep reads one array from threads of its own process; a figure that agrees from separate processes and
separate code is the machine's, not the method's. Expect agreement within the machine's noise.
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

READERS = {
    "float64 sum": lambda data: data.sum(),
    "float64 max": lambda data: data.max(),
    "uint64 bitwise or": lambda data: np.bitwise_or.reduce(data.view(np.uint64)),
    "float64 dot with itself": lambda data: np.dot(data, data),
}
# each process reads on one core: BLAS threads of their own would crowd the other processes' cores
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _reader(nbytes: int, repeats: int, barrier, spans) -> None:
    data = np.ones(nbytes // 8)  # written once, so every page is mapped before timing
    for name, read in READERS.items():
        read(data)  # warm-up
        for _ in range(repeats):
            barrier.wait()
            t0 = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process of the machine
            read(data)
            spans.put((name, t0, time.perf_counter()))


def measure(procs: int, mib: int, repeats: int) -> dict:
    ctx = mp.get_context("spawn")  # fresh interpreters: no state shared with this one
    barrier, spans = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_reader, args=(mib * 2**20 // procs, repeats, barrier, spans))
               for _ in range(procs)]
    saved = {name: os.environ.get(name) for name in ONE_THREAD}
    os.environ.update(ONE_THREAD)  # what the spawned interpreters inherit when they start
    try:
        for w in workers:
            w.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    got = [spans.get(timeout=600) for _ in range(procs * repeats * len(READERS))]
    for w in workers:
        w.join()
    gbps, walls = {}, {}
    for name in READERS:
        starts = sorted((t0, t1) for reader, t0, t1 in got if reader == name)
        rounds = [starts[i * procs:(i + 1) * procs] for i in range(repeats)]
        walls[name] = [max(end for _, end in r) - min(start for start, _ in r) for r in rounds]
        gbps[name] = mib * 2**20 / statistics.median(walls[name]) / 1e9
    best = max(gbps, key=gbps.get)
    return {"gbps": gbps[best], "reader": best, "gbps_by_reader": gbps, "procs": procs, "mib": mib, "walls_s": walls}


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
