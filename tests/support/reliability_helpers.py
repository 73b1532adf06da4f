"""Helpers shared by the reliability, security and load tests (no fixtures here: see conftest.py)."""

from __future__ import annotations

import statistics
import urllib.parse

import psutil


def server_pid(url: str) -> int:
    """The process listening on the app's port (the real `python app.py`)."""
    port = urllib.parse.urlsplit(url).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return conn.pid
    raise AssertionError(f"no process listens on port {port}")


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def ascii_curve(values: list[float], width: int = 50) -> str:
    """A small text plot of a curve, one line per point, for test output and reports."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, 16.0)  # at least 16 MB full scale: a flat curve draws flat
    return "\n".join(f"{i:4d} {v:8.1f} MB |{'#' * (1 + int((v - lo) / span * (width - 1)))}" for i, v in enumerate(values))


def steady_growth_mb(curve: list[float]) -> float:
    """How much memory grows per sampling interval, steadily: the median of the growth between consecutive
    samples. A leak grows every interval; an allocator arena or a cache that grows once shows in one interval
    only, so it cannot fail a test on its own (a bound on total growth can), and a leak cannot hide behind
    a one-off drop."""
    if len(curve) < 4:
        raise ValueError(f"need at least 4 samples to tell a trend from a step, got {len(curve)}")
    return statistics.median(b - a for a, b in zip(curve, curve[1:]))
