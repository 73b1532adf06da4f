"""Dynamic batching for a server: requests that arrive close together run as one batched generation.

Built on asyncio, the event loop the web server already runs: each request awaits a future, and one task
collects what is waiting, takes the oldest request's group (requests that can share a batch), waits a
moment for company unless the batch is already full, and runs the batch in a worker thread. While a batch
runs, new requests gather, so under load each batch takes everything that arrived during the one before.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

from chattts_lab.serve.batch import Part
from chattts_lab.serve.policy import BatchPolicy


@dataclass(eq=False)
class _Job:
    key: Hashable
    part: Part
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class Batcher:
    """`run(key, parts)` does the work of one batch (in a worker thread) and returns one result per part."""

    def __init__(self, run: Callable[[Hashable, list[Part]], list], policy: BatchPolicy = BatchPolicy()):
        self.run, self.policy = run, policy
        self._waiting: list[_Job] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived: asyncio.Event | None = None
        self.running: list[Part] = []  # the batch in progress

    def waiting(self) -> int:
        """Requests not yet started."""
        return len(self._waiting)

    async def submit(self, key: Hashable, part: Part):
        """This part's result, once a batch of its group has run. Cancelling the caller stops its part."""
        self._bind_to_running_loop()
        job = _Job(key, part, self._loop.create_future())
        self._waiting.append(job)
        self._arrived.set()
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            part.stop.set()
            if job in self._waiting:
                self._waiting.remove(job)
            raise

    def _bind_to_running_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first request (or a new server loop): start collecting on this loop
            self._loop, self._arrived, self._waiting = loop, asyncio.Event(), []
            loop.create_task(self._collect())

    async def _collect(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._waiting:
                await self._wait_for_company()
                if self._waiting:  # unless the callers gave up while waiting
                    await self._run_batch(self._take_batch())

    async def _wait_for_company(self) -> None:
        oldest = self._waiting[0]
        deadline = oldest.enqueued + self.policy.max_wait_ms / 1000
        while self._rows_ready(oldest.key) < self.policy.max_batch and (left := deadline - time.perf_counter()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                break

    def _rows_ready(self, key: Hashable) -> int:
        return sum(job.part.rows for job in self._waiting if job.key == key)

    def _take_batch(self) -> list[_Job]:
        """The oldest request and the next ones of its group, up to max_batch rows (one large request runs alone)."""
        key, batch, rows = self._waiting[0].key, [], 0
        for job in list(self._waiting):
            if job.key != key or (batch and rows + job.part.rows > self.policy.max_batch):
                continue
            batch.append(job)
            rows += job.part.rows
            self._waiting.remove(job)
        return batch

    async def _run_batch(self, batch: list[_Job]) -> None:
        started = time.perf_counter()
        for job in batch:
            job.part.queue_wait_s = started - job.enqueued
        self.running = [job.part for job in batch]
        try:
            results = await asyncio.to_thread(self.run, batch[0].key, self.running)
        except Exception as exc:  # the whole batch failed (out of memory, a lost model): each caller hears why
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
        else:
            for job, result in zip(batch, results):
                if not job.future.done():
                    job.future.set_result(result)
        finally:
            self.running = []
