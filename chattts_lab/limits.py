"""Resource limits: the one out-of-memory error, and a per-cell memory budget for sweep workers.

Out of memory: `out_of_memory_boundary()` is the one place where an allocator failure (Python's
MemoryError, torch's OutOfMemoryError, or the plain RuntimeError torch's CPU allocator raises) is
recognised and re-raised as `OutOfMemory`; loading a model, synthesis and the sweep worker run inside
it, and everything above catches `OutOfMemory` by type.

A budget is enforced by the kernel, not by polling: the worker caps its own address space
(RLIMIT_AS) at what it has already mapped (Python, torch, ChatTTS imported) plus the budget. Any
allocation past that fails at once inside the worker, which then reports `oom` like any other
out-of-memory error, and the sweep goes on with the next cell. Address space is larger than RSS
(weights are mmapped, thread stacks are reserved), so a budget is an upper bound on what the model
load and the calls may add, not on resident memory.
"""

from __future__ import annotations

import gc
import logging
import resource
import sys
from contextlib import contextmanager
from dataclasses import replace

import psutil

log = logging.getLogger(__name__)

# torch's CPU allocator raises a bare RuntimeError ("DefaultCPUAllocator: can't allocate memory"): no type to catch.
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "failed to allocate")
MIN_BUDGET_MB = 1
MAX_BUDGET_MB = 16 * 2**20  # 16 TB: anything above is a typo


class OutOfMemory(ValueError):
    """The work asked for more memory than the device has. The process and a loaded model stay usable.

    A ValueError because, like bad input, the caller fixes it by asking for less (servers show its
    message to the person who asked)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True for any allocator failure: MemoryError, torch's (CUDA) OutOfMemoryError, or the RuntimeError
    torch's CPU allocator raises, which has no type of its own."""
    torch = sys.modules.get("torch")  # only a loaded torch can have raised its own error type
    if isinstance(exc, MemoryError) or (torch is not None and isinstance(exc, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MARKERS)


@contextmanager
def out_of_memory_boundary(doing: str, advice: str = ""):
    """Re-raise an allocator failure inside the block as OutOfMemory: "out of memory <doing>; <advice> (<error>)"."""
    try:
        yield
    except OutOfMemory:
        raise
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        if not is_out_of_memory(exc):
            raise
        gc.collect()  # free what the failed work left behind before anyone retries
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        detail = f"{type(exc).__name__}: {exc}".strip()[:300]
        raise OutOfMemory(f"out of memory {doing}{'; ' + advice if advice else ''} ({detail})") from exc


def memory_budget_error(budget) -> str | None:
    """Why a budget value is unusable (None when it is fine or absent)."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget != budget:
        return f"memory budget must be a number of MB, got {budget!r}"
    if not MIN_BUDGET_MB <= budget <= MAX_BUDGET_MB:
        return f"memory budget must be in {MIN_BUDGET_MB}..{MAX_BUDGET_MB:,} MB, got {budget:g}"
    return None


def apply_memory_budget(budget_mb: float | None) -> int | None:
    """Cap this process's address space at its current size plus budget_mb; returns the limit in bytes."""
    if not budget_mb:
        return None
    limit = psutil.Process().memory_info().vms + int(budget_mb * 2**20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    log.info("memory budget %.0f MB: address space capped at %.0f MB", budget_mb, limit / 2**20)
    return limit


def crash_under_budget(outcome, budget_mb: float):
    """A worker that died (rather than raising) while capped most likely hit the cap in native code
    (a failed allocation that C++ turns into abort): record it as `oom`, keeping the original reason."""
    return replace(outcome, status="oom",
                   reason=f"out of memory: the worker died under its {budget_mb:g} MB memory budget ({outcome.reason})")
