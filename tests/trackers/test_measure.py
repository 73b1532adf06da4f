"""The measuring instruments against known workloads, and the repeat and failure rules of a cell."""

import time

import numpy as np
import pytest
import torch

from chattts_lab.limits import OutOfMemory, out_of_memory_boundary
from chattts_lab.trackers.measure import PeakMemory, Stopwatch
from chattts_lab.trackers.measure import repeat_until
from chattts_lab.sweep.worker import classify


def test_stopwatch_times_a_known_sleep_in_seconds_between_two_readings_of_the_system_clock():
    # Bracketed by the monotonic clock read outside it: the stopwatch's interval must lie between the sleep asked
    # for and the outer interval, so a stopwatch in other units, of CPU time, or of a frozen clock fails here,
    # and a busy machine only moves both bounds apart.
    clock = Stopwatch()
    outer0 = time.monotonic()
    t0 = clock.now()
    time.sleep(0.2)
    elapsed = clock.now() - t0
    outer = time.monotonic() - outer0
    assert 0.2 <= elapsed <= outer, (elapsed, outer)


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


class FakeClock:
    """A clock that only moves when a call 'takes' time: repeat_until's decisions without real sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call_taking(self, seconds: float):
        def call():
            self.now += seconds
            return self.now
        return call


def test_repeats_until_both_count_and_duration_are_reached():
    clock = FakeClock()
    out = repeat_until(clock.call_taking(0.05), min_count=2, min_time_s=0.3, max_count=50, clock=clock)
    assert len(out) == 6  # the duration, not the count, decided here: 6 calls of 0.05 s reach 0.3 s
    clock = FakeClock()
    out = repeat_until(clock.call_taking(1.0), min_count=4, min_time_s=0.5, max_count=50, clock=clock)
    assert len(out) == 4  # the count decided here
    clock = FakeClock()
    out = repeat_until(clock.call_taking(0.01), min_count=1, min_time_s=10.0, max_count=3, clock=clock)
    assert len(out) == 3  # the cap wins


@pytest.mark.parametrize("exc", [
    MemoryError(),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
])
def test_allocator_failures_become_one_typed_error_at_the_boundary(exc):
    with pytest.raises(OutOfMemory, match=r"^out of memory on cpu doing this; ask less \(") as raised:
        with out_of_memory_boundary("on cpu doing this", "ask less"):
            raise exc
    assert raised.value.__cause__ is exc  # the allocator's own error stays attached
    assert classify(raised.value) == ("oom", str(raised.value))


@pytest.mark.parametrize("exc", [ValueError("something else"), RuntimeError("mat1 and mat2 shapes cannot be multiplied")])
def test_other_errors_cross_the_boundary_unchanged_and_are_errors(exc):
    with pytest.raises(type(exc)) as raised:
        with out_of_memory_boundary("on cpu doing this"):
            raise exc
    assert raised.value is exc
    assert classify(exc) == ("error", f"{type(exc).__name__}: {exc}")


def test_unsupported_and_absent_devices_are_classified():
    from chattts_lab.devices import DeviceUnavailable
    from chattts_lab.engines import UnsupportedPrecision

    assert classify(UnsupportedPrecision("no"))[0] == "unsupported"
    assert classify(DeviceUnavailable("absent"))[0] == "skipped"
