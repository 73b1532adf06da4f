"""Typed statistics over raw samples: every summary in a result is derived from stored samples here.

Percentiles use linear interpolation between closest ranks (numpy's default, "type 7"); the standard
deviation is the sample standard deviation (n - 1 in the denominator), 0 for a single sample.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100): numpy's, linear interpolation between closest ranks; a sentence for bad input."""
    if not len(values):
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in 0..100, got {q}")
    return float(np.percentile(values, q))


@dataclass(frozen=True)
class Latency:
    """Summary of a list of durations in seconds (or any positive measure)."""

    count: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    std: float
    min: float
    max: float

    @staticmethod
    def from_values(values: Iterable[float]) -> "Latency":
        vals = [float(v) for v in values]
        if not vals:
            raise ValueError("no samples to summarise")
        if not all(math.isfinite(v) for v in vals):
            raise ValueError("samples must be finite numbers")
        n = len(vals)
        p50, p90, p95, p99 = (float(p) for p in np.percentile(vals, (50, 90, 95, 99)))
        std = float(np.std(vals, ddof=1)) if n > 1 else 0.0
        return Latency(count=n, mean=float(np.mean(vals)), p50=p50, p90=p90, p95=p95, p99=p99, std=std,
                       min=min(vals), max=max(vals))

    @property
    def cv(self) -> float | None:
        """Coefficient of variation (std / mean): the run-to-run spread as a fraction."""
        return self.std / self.mean if self.mean > 0 else None

    def as_dict(self) -> dict:
        return asdict(self)


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    vals = [float(v) for v in values if v is not None]
    return percentile(vals, 50) if vals else None
