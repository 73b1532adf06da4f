"""The measuring instruments against known workloads, and the repeat and failure rules of a cell."""

import time

import numpy as np
import pytest

from chattts_lab.measure import PeakMemory, Stopwatch
from chattts_lab.worker import classify, repeat_until


def test_stopwatch_times_a_known_sleep():
    clock = Stopwatch()
    t0 = clock.now()
    time.sleep(0.5)
    elapsed = clock.now() - t0
    assert 0.45 <= elapsed <= 0.65


def test_peak_rss_sees_a_known_allocation_made_and_freed_inside_the_region():
    size_mb = 300
    with PeakMemory() as mem:
        baseline_mb = _rss_mb()
        block = np.ones(size_mb * 2**20 // 8, dtype=np.float64)  # ones: every page is touched
        del block  # freed before the region ends: only a peak tracker can still see it
    grown = mem.peaks.rss_mb - baseline_mb
    assert size_mb * 0.9 <= grown <= size_mb * 1.1, grown


def _rss_mb():
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def test_repeats_until_both_count_and_duration_are_reached():
    calls = []
    out = repeat_until(lambda: calls.append(time.sleep(0.05)) or len(calls), min_count=2, min_time_s=0.3, max_count=50)
    assert len(out) >= 6  # the duration, not the count, decided here
    out = repeat_until(lambda: 1, min_count=4, min_time_s=0.0, max_count=50)
    assert len(out) == 4  # the count decided here
    out = repeat_until(lambda: time.sleep(0.01), min_count=1, min_time_s=10.0, max_count=3)
    assert len(out) == 3  # the cap wins


@pytest.mark.parametrize("exc, status", [
    (MemoryError(), "oom"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), "oom"),
    (ValueError("something else"), "error"),
])
def test_failures_are_classified(exc, status):
    assert classify(exc)[0] == status


def test_unsupported_and_absent_devices_are_classified():
    from chattts_lab.devices import DeviceUnavailable
    from chattts_lab.precision import UnsupportedPrecision

    assert classify(UnsupportedPrecision("no"))[0] == "unsupported"
    assert classify(DeviceUnavailable("absent"))[0] == "skipped"
