"""How a server schedules its requests: the bounds of continuous batching's rows and queue."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerPolicy:
    """The continuous-batching loop's bounds (chattts_lab.serve.scheduler), the app's and the serving benchmark's
    default."""

    max_rows: int = 8  # texts generated at once (KV-cache rows)
    max_queue: int = 16  # requests waiting for a row; beyond, refused at once

    def __post_init__(self):
        if not 1 <= self.max_rows <= 64:
            raise ValueError(f"max rows must be in 1..64, got {self.max_rows}")
        if not 0 <= self.max_queue <= 10_000:
            raise ValueError(f"max queue must be in 0..10000, got {self.max_queue}")
