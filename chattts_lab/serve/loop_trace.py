"""A record of what the continuous-batching loop did and when, to find where a stream's time goes (issue 41).

Off unless $CHATTTS_LAB_LOOP_TRACE names a file: then every prefill (whole, or a slice of one), GPT step, chunk
decode, chunk handed to a stream and garbage collection is kept in memory as it happens (a dict appended: no I/O inside the loop) and
appended to that file as JSON lines whenever a request is answered. Off, each event costs one test of `enabled`.

Each record: `t` (seconds since the trace began, when the event started), `kind`, `s` (its wall time) and what it
was about:
- prefill: a whole prompt in one forward (into an idle loop, or one no longer than a slice): `row` (the row's
  number in this trace), `prompt` (positions), `rows` (active rows after it)
- slice: part of a prompt prefilled while other rows waited for it (chunked prefill): `row`, `prompt`, `rows`,
  `start` (its first position), `positions`, `last` (whether it completed the prompt: the row generates from then on)
- step: `rows` (the rows stepped)
- decode: `rows` (spans decoded in one call), `tokens` (each span's new tokens), `first` (how many were a row's
  first chunk)
- chunk: `row`, `tokens` (its new tokens), `ahead_s` (audio the row had sent beyond what a real-time listener
  started at its first chunk had played, just before this chunk; None for a first chunk), `since_admit_s`
- gc: `generation`, `collected`

`scripts/probes/loop_trace_summary.py` reads a trace back into per-kind figures and each row's worst gap.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from contextlib import contextmanager

ENV = "CHATTTS_LAB_LOOP_TRACE"


class LoopTrace:
    """The loop's record; `enabled` False (no file named) makes every method a no-op."""

    def __init__(self, path: str | None = None):
        self.path, self.enabled = path, bool(path)
        self._records: list[dict] = []
        self._lock = threading.Lock()  # gc callbacks may come from any thread
        self._t0 = time.perf_counter()
        self._gc_began: float | None = None
        self._rows = 0
        if self.enabled:
            gc.callbacks.append(self._on_gc)

    @classmethod
    def from_env(cls) -> "LoopTrace":
        return cls(os.environ.get(ENV) or None)

    def record(self, kind: str, began: float, **fields) -> None:
        """An event that started at perf_counter() `began` and ends now."""
        if self.enabled:
            now = time.perf_counter()
            with self._lock:
                self._records.append(dict(t=round(began - self._t0, 6), kind=kind, s=round(now - began, 6),
                                          **fields))

    @contextmanager
    def timed(self, kind: str, **fields):
        began = time.perf_counter()
        yield
        self.record(kind, began, **fields)

    def row_number(self, meta: dict) -> int | None:
        """The row's number in this trace (kept in its meta), given at its admission."""
        if not self.enabled:
            return None
        if "trace" not in meta:
            self._rows += 1
            meta["trace"] = self._rows
        return meta["trace"]

    def flush(self) -> None:
        """Append what was recorded to the file (the loop calls it as it answers a request)."""
        if not self.enabled:
            return
        with self._lock:
            records, self._records = self._records, []
        if records:
            with open(self.path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        elif self._gc_began is not None:
            self.record("gc", self._gc_began, generation=info.get("generation"), collected=info.get("collected"))
            self._gc_began = None
