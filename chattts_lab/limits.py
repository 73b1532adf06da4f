"""Resource limits for untrusted or long-running work: a per-cell memory budget for sweep workers.

A budget is enforced by the kernel, not by polling: the worker caps its own address space
(RLIMIT_AS) at what it has already mapped (Python, torch, ChatTTS imported) plus the budget. Any
allocation past that fails at once inside the worker, which then reports `oom` like any other
out-of-memory error, and the sweep goes on with the next cell. Address space is larger than RSS
(weights are mmapped, thread stacks are reserved), so a budget is an upper bound on what the model
load and the calls may add, not on resident memory.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "failed to allocate")
MIN_BUDGET_MB = 1
MAX_BUDGET_MB = 16 * 2**20  # 16 TB: anything above is a typo


def is_out_of_memory(exc: BaseException) -> bool:
    """True for any allocator failure: MemoryError, torch's (CUDA) OutOfMemoryError, or the RuntimeError
    torch's CPU allocator raises ("can't allocate memory"), which has no type of its own."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MARKERS)


def memory_budget_error(budget) -> str | None:
    """Why a budget value is unusable (None when it is fine or absent)."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget != budget:
        return f"memory budget must be a number of MB, got {budget!r}"
    if not MIN_BUDGET_MB <= budget <= MAX_BUDGET_MB:
        return f"memory budget must be in {MIN_BUDGET_MB}..{MAX_BUDGET_MB:,} MB, got {budget:g}"
    return None


def current_address_space_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().vms


def apply_memory_budget(budget_mb: float | None) -> int | None:
    """Cap this process's address space at its current size plus budget_mb; returns the limit in bytes."""
    if not budget_mb:
        return None
    limit = current_address_space_bytes() + int(budget_mb * 2**20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    log.info("memory budget %.0f MB: address space capped at %.0f MB", budget_mb, limit / 2**20)
    return limit


def crash_under_budget(outcome, budget_mb: float):
    """A worker that died (rather than raising) while capped most likely hit the cap in native code
    (a failed allocation that C++ turns into abort): record it as `oom`, keeping the original reason."""
    from dataclasses import replace

    return replace(outcome, status="oom",
                   reason=f"out of memory: the worker died under its {budget_mb:g} MB memory budget ({outcome.reason})")
