"""Measuring a region of code: wall time, peak process RSS and peak device memory.

Peak RSS must be read *during* the work: right after loading, weights are mmapped lazily and RSS
understates the footprint. On Linux the kernel's own high-water mark (VmHWM) is reset before the
region and read after it (no thread runs beside the work); elsewhere a sampling thread approximates it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil
import torch

MB = 1024 * 1024


def _reset_kernel_peak() -> bool:
    """Reset VmHWM to the current RSS ('5' = reset peak RSS, Linux >= 4.0). False where unavailable."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _kernel_peak_mb() -> float | None:
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def process_peak_rss_mb() -> float:
    """The process's lifetime peak RSS (or the current RSS where no peak is kept)."""
    peak = _kernel_peak_mb()
    return peak if peak is not None else psutil.Process().memory_info().rss / MB


@dataclass
class MemoryPeaks:
    rss_mb: float = 0.0
    device_mb: float | None = None  # torch's peak allocated bytes on the CUDA device; None off CUDA


class PeakMemory:
    """Context manager: peak RSS and peak CUDA memory over the region it wraps.

    Note: resetting VmHWM also forgets the process's earlier peak; read `process_peak_rss_mb()` first
    if the lifetime peak matters.
    """

    def __init__(self, device: torch.device | None = None, interval_s: float = 0.005):
        self.device = device
        self.interval_s = interval_s
        self.peaks = MemoryPeaks()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kernel = False

    def __enter__(self) -> "PeakMemory":
        self._kernel = _reset_kernel_peak()
        self._sampled = psutil.Process().memory_info().rss
        if not self._kernel:
            # Only where the kernel keeps no resettable peak: a sampling thread wakes every few ms and
            # takes the GIL, which slows the decode loop it measures on a machine with few cores.
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def _sample(self) -> None:
        proc = psutil.Process()
        while not self._stop.wait(self.interval_s):
            self._sampled = max(self._sampled, proc.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        sampled_mb = self._sampled / MB
        kernel_mb = _kernel_peak_mb() if self._kernel else None
        self.peaks.rss_mb = max(sampled_mb, kernel_mb or 0.0)
        if self.device is not None and self.device.type == "cuda":
            self.peaks.device_mb = torch.cuda.max_memory_allocated(self.device) / MB


class Stopwatch:
    """perf_counter-based clock that synchronises the device before each reading."""

    def __init__(self, device: torch.device | None = None):
        self.device = device

    def now(self) -> float:
        if self.device is not None and self.device.type != "cpu":
            from chattts_lab.devices import synchronize

            synchronize(self.device)
        return time.perf_counter()


def repeat_until(fn: Callable[[], object], min_count: int, min_time_s: float, max_count: int,
                 clock: Callable[[], float] = time.perf_counter) -> list:
    """Call fn until it ran at least min_count times AND for at least min_time_s seconds (max_count caps it)."""
    results: list = []
    t0 = clock()
    while len(results) < max_count and (len(results) < min_count or clock() - t0 < min_time_s):
        results.append(fn())
    return results
