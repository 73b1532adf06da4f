"""Interleaved passes: every cell's worker stays loaded (as many as fit in memory); each pass makes one timed call
of each cell, in a fresh random order, so a machine that drifts during the sweep moves every cell alike.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import psutil

from chattts_lab.said import Said
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.trackers.roofline import measure_read_bandwidth, with_another_read, with_bandwidth
from chattts_lab.sweep.spec import SweepSpec, cell_rule
from chattts_lab.history.store import Store
from chattts_lab.sweep.supervisor import CellWorker, ChildOutcome, WorkerEnded, result_of
from chattts_lab.sweep.events import CallTimed, CellFinished, CellStarted, PassStarted, SweepEvent, SweepPlanned


MEMORY_HEADROOM = 0.8  # of the memory available at the start: what the sweep's workers may take together


@dataclass(eq=False)  # a cell is itself: compared by identity in pass orders
class _Cell:
    """One runnable cell of an interleaved sweep and what its workers gave back so far."""

    index: int
    cfg: RunConfig
    worker: CellWorker | None = None
    resident: bool = True  # stays loaded between passes (False: reloaded before its turn in each pass)
    payloads: list[dict] = field(default_factory=list)  # outcomes of its workers that were closed
    live: list[dict] = field(default_factory=list)  # timed samples from the worker loaded now
    pids: list[int] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)  # each closed worker's own work (CellWorker.busy_s)
    done: bool = False

    def start(self, stop: Callable[[], bool]) -> dict:
        self.worker = CellWorker(self.cfg)
        ready = self.worker.ready(stop)
        self.pids.append(ready["pid"])
        return ready

    def close(self, outcome: ChildOutcome) -> None:
        """Keep what the worker gave back (a worker that died sent no payload: its streamed samples stand in)."""
        payload = outcome.payload if "samples" in outcome.payload else {**outcome.payload, "samples": self.live}
        self.payloads.append(payload)
        self.busy_s.append(outcome.elapsed_s)
        self.live, self.worker = [], None

    def result(self, outcome: ChildOutcome) -> CellResult:
        """The cell's row: the statistics of every pass, the effective settings of its last worker."""
        first, last = (self.payloads[0], self.payloads[-1]) if self.payloads else ({}, {})
        payload = {**first, "effective": last.get("effective") or first.get("effective"),
                   "traceback": last.get("traceback", ""),
                   "samples": [s for p in self.payloads for s in p.get("samples", [])],
                   "extra": {**(first.get("extra") or {}), "worker_pids": self.pids, "worker_busy_s": self.busy_s}}
        merged = ChildOutcome(outcome.status, outcome.reason, payload, sum(self.busy_s), outcome.stderr)
        return result_of(self.cfg, merged)


def memory_plan(loaded_mb: list[float], cells: int, allowance_mb: float) -> int:
    """How many workers stay loaded: as many as fit in the allowance, one place kept free for a reloaded one."""
    per_worker = max(loaded_mb, default=0.0)
    if sum(loaded_mb) <= allowance_mb and len(loaded_mb) == cells:
        return cells
    fit = int(allowance_mb // per_worker) if per_worker > 0 else cells
    return max(0, min(len(loaded_mb), fit - 1))


def pass_order(rng: random.Random, cells: list, previous: list) -> list:
    """A fresh random order, never the previous pass's again (so no cell keeps its place in every pass)."""
    order = rng.sample(cells, k=len(cells))
    while len(cells) > 1 and order == [c for c in previous if c in cells]:
        order = rng.sample(cells, k=len(cells))
    return order


def plan_sentence(passes: int, cells: int, resident: int, allowance_mb: float, per_worker_mb: float) -> str:
    if resident == cells:
        return Said("{passes} interleaved passes over {cells} cells, a fresh random order each pass; each pass makes "
                    "one timed call of every cell. Every cell's worker stays loaded between passes (about "
                    "{per_worker:.0f} MB each), and makes one more untimed call once all are loaded.",
                    passes=passes, cells=cells, per_worker=per_worker_mb)
    return Said("{passes} interleaved passes over {cells} cells, a fresh random order each pass; each pass makes one "
                "timed call of every cell. {resident} worker(s) stay loaded and {reloaded} are loaded again before "
                "their turn in each pass: about {per_worker:.0f} MB a worker, {allowance:.0f} MB allowed for all. "
                "Loading, the cold call and warm-up are never timed.", passes=passes, cells=cells, resident=resident,
                reloaded=cells - resident, per_worker=per_worker_mb, allowance=allowance_mb)


def run_interleaved(sweep_id: int, cells: list[_Cell], total: int, n_done: int, store: Store, passes: int,
                    stop: Callable[[], bool], allowance_mb: float | None,
                    environment: dict) -> Iterator[SweepEvent]:
    """Load every cell that fits, run the passes, commit each cell when it ends (its last pass or its failure).

    Returns (as the generator's value) `cancelled` when stopped, else `finished`.
    """
    allowance = allowance_mb if allowance_mb is not None else (
        psutil.virtual_memory().available / 2**20 * MEMORY_HEADROOM)
    run = _Interleaved(sweep_id, cells, total, n_done, store, stop, environment)
    try:
        if not (yield from run.load(allowance)):
            return "cancelled"
        yield from run.plan(passes, allowance)
        try:
            yield from run.passes(passes)
        except WorkerEnded as ended:  # stopped: every unfinished cell is kept as cancelled
            yield from run.cancel_all(ended.outcome.reason)
            return "cancelled"
        yield from run.finish_all()
    finally:  # an exception or the generator closed: never leave a worker behind
        for cell in cells:
            if cell.worker is not None:
                cell.worker.kill()
    return "finished"


@dataclass
class _Interleaved:
    """One interleaved run's cells and where they stand; each step yields the events it makes."""

    sweep_id: int
    cells: list[_Cell]
    total: int
    n_done: int
    store: Store
    stop: Callable[[], bool]
    environment: dict
    loaded_mb: list[float] = field(default_factory=list)

    def end(self, cell: _Cell, outcome: ChildOutcome) -> CellFinished:
        """Commit the cell's row (its last pass, or its failure)."""
        if cell.worker is not None:
            cell.close(outcome)
        cell.done = True
        result = with_bandwidth(cell.result(outcome), self.environment)
        self.store.add_cell(self.sweep_id, cell.index, result)
        self.n_done += result.status != "cancelled"
        return CellFinished(self.sweep_id, cell.index, self.total, result, self.n_done, None)

    def cancel_all(self, reason: str) -> Iterator[CellFinished]:
        for cell in self.cells:
            if not cell.done:
                if cell.worker is not None:
                    cell.worker.kill()
                yield self.end(cell, ChildOutcome("cancelled", reason, {}, cell.worker.busy_s if cell.worker else 0.0))

    def load(self, allowance: float) -> Iterator[SweepEvent]:
        """Load workers in grid order while they fit (the first always loads: it sizes the rest); False if stopped."""
        for cell in self.cells:
            if self.loaded_mb and sum(self.loaded_mb) + max(self.loaded_mb) > allowance:
                break
            yield CellStarted(self.sweep_id, cell.index, self.total, cell.cfg, None)
            try:
                self.loaded_mb.append(cell.start(self.stop)["peak_rss_mb"])
            except WorkerEnded as ended:
                if ended.outcome.status == "cancelled":
                    yield from self.cancel_all(ended.outcome.reason)
                    return False
                yield self.end(cell, ended.outcome)
        return True

    def plan(self, passes: int, allowance: float) -> Iterator[SweepEvent]:
        """Which workers stay loaded; the ones loaded only to size the others are closed until their turn."""
        alive = [c for c in self.cells if c.worker is not None]
        keep = memory_plan(self.loaded_mb, len([c for c in self.cells if not c.done]), allowance)
        for cell in self.cells:
            cell.resident = cell in alive[:keep]
        for cell in alive[keep:]:
            outcome = cell.worker.finish(self.stop)
            cell.close(outcome)
            if outcome.status != "ok":
                yield self.end(cell, outcome)
        plan = plan_sentence(passes, len(self.cells), keep, allowance, max(self.loaded_mb, default=0.0))
        self.store.set_note(self.sweep_id, "plan", plan)
        yield SweepPlanned(self.sweep_id, plan)

    def one_call(self, cell: _Cell, labels: dict, phase: str = "timed") -> Iterator[CellFinished]:
        """The cell's call of this pass, loading its worker first if it is not resident; a failure ends it."""
        try:
            if cell.worker is None:
                if not cell.pids:
                    yield CellStarted(self.sweep_id, cell.index, self.total, cell.cfg, None)
                cell.start(self.stop)
            sample = cell.worker.repeat(labels, self.stop, phase)
            if phase == "timed":
                cell.live.append(sample)
            if not cell.resident:
                outcome = cell.worker.finish(self.stop)
                cell.close(outcome)
                if outcome.status != "ok":
                    yield self.end(cell, outcome)
        except WorkerEnded as ended:
            if ended.outcome.status == "cancelled":
                raise
            yield self.end(cell, ended.outcome)

    def passes(self, passes: int) -> Iterator[SweepEvent]:
        # Loading the later workers evicts what the earlier ones had warm (their mmapped weights, caches):
        # one untimed call of every resident cell, now that all are loaded, pays for that outside the passes.
        for cell in [c for c in self.cells if c.resident and c.worker is not None]:
            yield from self.one_call(cell, {"pass": "warm"}, "warmup")
        rng, orders, order = random.Random(), [], []
        started, timed = None, 0  # when the first pass began, and the calls timed since
        for pass_no in range(passes):
            order = pass_order(rng, [c for c in self.cells if not c.done], order)
            if not order:
                break
            orders.append([c.index for c in order])
            self.store.set_note(self.sweep_id, "pass_orders", orders)
            read_bandwidth_again(self.sweep_id, self.store, self.environment, "pass")  # read as the cells are timed
            yield PassStarted(self.sweep_id, pass_no, passes, tuple(c.index for c in order))
            started = started or time.monotonic()
            for position, cell in enumerate(order):
                yield from self.one_call(cell, {"pass": pass_no, "position": position})
                timed += 1
                left = len(order) * (passes - pass_no) - position - 1  # as many cells in the passes to come
                yield CallTimed(self.sweep_id, pass_no, passes, position + 1, len(order),
                                (time.monotonic() - started) / timed * left)

    def finish_all(self) -> Iterator[CellFinished]:
        for cell in self.cells:
            if cell.done:
                continue
            outcome = cell.worker.finish(self.stop) if cell.worker is not None else None
            if outcome is not None:
                cell.close(outcome)
            last = cell.payloads[-1]
            yield self.end(cell, outcome or ChildOutcome(last.get("status", "ok"), last.get("reason", ""), last, 0.0))


def read_bandwidth_again(sweep_id: int, store: Store, environment: dict, before: str) -> dict:
    """Read each measured device's bandwidth once more (before each "pass" or each "cell"), keep the read in the
    sweep's environment (`roofline.with_another_read`) and return it, as `measure_read_bandwidth` does.

    An interleaved pass times every cell, so its rows take the median of the reads over the passes; a one-pass
    sweep times its cells one after another, so each row takes the read made just before its cell: on a VM whose
    bandwidth changes regime for minutes at a time, a read at the sweep's start can be minutes away from a cell.
    """
    if not environment.get("mem_read_gbps"):  # not measured (an older sweep resumed): nothing to read again
        return environment
    measured = measure_read_bandwidth(list(environment["mem_read_gbps"]))
    environment.update(with_another_read(environment, measured), mem_read_before=before)
    store.update_environment(sweep_id, environment)
    return measured


def run_ruled_then_interleaved(sweep_id: int, pending: list, total: int, store: Store, spec: SweepSpec,
                                stop: Callable[[], bool], memory_allowance_mb: float | None, environment: dict) -> Iterator[SweepEvent]:
    """Rows for the cells the rule table stops, then the runnable cells in interleaved passes."""
    n_done = total - len(pending)
    cells = []
    for index, cfg in pending:
        ruled = cell_rule(cfg)
        if ruled is None:
            cells.append(_Cell(index, cfg))
            continue
        yield CellStarted(sweep_id, index, total, cfg, None)
        result = CellResult(cfg, *ruled)
        store.add_cell(sweep_id, index, result)
        n_done += 1
        yield CellFinished(sweep_id, index, total, result, n_done, None)
    return (yield from run_interleaved(sweep_id, cells, total, n_done, store, spec.passes, stop,
                                       memory_allowance_mb, environment))
