"""Running a sweep: each cell in a fresh worker process, every result committed to the store as it ends.

    SweepSpec --expand()--> [RunConfig] --cell_rule() or a fresh worker process--> CellResult --> Store

`run_sweep` is a generator of progress events, so a command line can draw a progress bar and a UI can
show a live table and stop the sweep between (or during) cells without losing finished rows:

    for event in run_sweep(spec, "results/lab.sqlite", should_stop=lambda: stop_clicked):
        if isinstance(event, CellFinished): show(event.result.row())

The types live apart (chattts_lab.results, chattts_lab.spec) so the store and the reports need not
import this runner; statistics are derived from the worker's raw samples by `results.summarize`.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import psutil

from chattts_lab import cluster
from chattts_lab.compare import sweep_drift
from chattts_lab.env import capture_environment
from chattts_lab.limits import crash_under_budget
from chattts_lab.results import DONE_STATUSES, PASS_MARKER, RESULT_MARKER, CellResult, RunConfig, summarize
from chattts_lab.roofline import measure_read_bandwidth, with_another_read, with_bandwidth
from chattts_lab.spec import SpecError, SweepSpec, absent_device_reason, cell_rule
from chattts_lab.store import Store
from chattts_lab.worker import repeat_until

log = logging.getLogger(__name__)
STDERR_KEPT_CHARS = 4000  # what a crashed cell keeps of its worker's stderr (the end, where the error is)


# ----------------------------------------------------------------------------------------------
# Running one cell in a fresh process


def worker_env(threads: int | None) -> dict:
    """The child's environment: thread pools sized before torch starts, so nothing leaks in."""
    env = dict(os.environ)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["CHATTTS_LAB_PARENT_PID"] = str(os.getpid())  # the worker dies with its parent (see worker.main)
    return env


@dataclass
class ChildOutcome:
    status: str  # ok / error / oom / ... as the worker says, or crashed / cancelled from the parent
    reason: str
    payload: dict
    elapsed_s: float
    stderr: str = ""


def run_child(task: dict, timeout_s: float, threads: int | None = None,
              should_stop: Callable[[], bool] | None = None, python: str | None = None,
              poll_s: float = 0.1) -> ChildOutcome:
    """Run `python -m chattts_lab.worker` on one task (a JSON object on stdin) and read its result."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [python or sys.executable, "-m", "chattts_lab.worker"], stdin=subprocess.PIPE, stdout=out, stderr=err,
            env=worker_env(threads), text=True, start_new_session=True, cwd=str(Path(__file__).resolve().parent.parent),
        )
        try:
            proc.stdin.write(json.dumps(task))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        outcome = None
        try:
            while proc.poll() is None:
                if should_stop is not None and should_stop():
                    _kill(proc)
                    outcome = ("cancelled", "stopped by the user while this cell ran")
                    break
                if time.monotonic() - t0 > timeout_s:
                    _kill(proc)
                    outcome = ("timeout", f"killed after exceeding the per-cell timeout of {timeout_s:g} s")
                    break
                time.sleep(poll_s)
        except BaseException:  # KeyboardInterrupt or the generator closed: never leave a worker behind
            _kill(proc)
            raise
        elapsed = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    payload = _parse_result(stdout)
    if outcome:
        return ChildOutcome(outcome[0], outcome[1], payload or {}, elapsed)
    if payload is None:
        return ChildOutcome("crashed", _death_reason(proc.returncode, stderr), {}, elapsed, stderr)
    return ChildOutcome(payload.get("status", "error"), payload.get("reason", ""), payload, elapsed, stderr)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _parse_result(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            try:
                return json.loads(line[len(RESULT_MARKER):])
            except json.JSONDecodeError:
                return None
    return None


def _death_reason(returncode: int, stderr: str) -> str:
    tail = " | ".join(line.strip() for line in stderr.strip().splitlines()[-3:])
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        hint = " (the kernel's out-of-memory killer sends SIGKILL)" if returncode == -signal.SIGKILL else ""
        why = f"worker killed by {sig}{hint}"
    else:
        why = f"worker exited with code {returncode} without a result"
    return f"{why}: {tail}" if tail else why


def run_cell(cfg: RunConfig, should_stop: Callable[[], bool] | None = None, python: str | None = None) -> CellResult:
    """Measure one cell: a rule row if it must not run, else a fresh worker process."""
    ruled = cell_rule(cfg)
    if ruled:
        return CellResult(cfg, ruled[0], ruled[1])
    outcome = run_child({"kind": "cell", "config": cfg.to_dict()}, cfg.timeout_s, cfg.threads, should_stop, python)
    return result_of(cfg, outcome)


def result_of(cfg: RunConfig, outcome: ChildOutcome) -> CellResult:
    """The cell's row from what its worker(s) gave back; a crash keeps the end of stderr as its traceback."""
    payload = outcome.payload
    if outcome.status == "crashed":  # no traceback came back: the end of the worker's stderr is the best record
        payload = {**payload, "traceback": outcome.stderr[-STDERR_KEPT_CHARS:]}
        if cfg.memory_budget_mb:  # dying rather than raising under a budget is the cap hit in native code
            outcome = crash_under_budget(outcome, cfg.memory_budget_mb)
    result = summarize(cfg, outcome.status, outcome.reason, payload, outcome.elapsed_s)
    if result.traceback and result.status in ("error", "crashed"):
        log.warning("cell %s: %s: %s\n%s", cfg.label, result.status, result.reason, result.traceback)
    return result


# ----------------------------------------------------------------------------------------------
# A worker that stays loaded between passes (interleaved sweeps)


class WorkerEnded(Exception):
    """The serving worker ended (finished, failed, died, timed out or was stopped): `outcome` says how."""

    def __init__(self, outcome: ChildOutcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


class CellWorker:
    """One cell's `python -m chattts_lab.worker` kept alive between passes, spoken to in JSON lines.

    The first line on its stdin is the `serve` task; then one command per line (`repeat` or `finish`).
    A reader thread moves its stdout lines into a queue so that every wait can also watch the clock and
    the stop flag. Its stderr goes to a temporary file (kept for a crash's traceback).
    """

    def __init__(self, cfg: RunConfig, python: str | None = None):
        self.cfg = cfg
        self.t0 = time.monotonic()
        self._stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "chattts_lab.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=worker_env(cfg.threads), text=True, bufsize=1, start_new_session=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send({"kind": "serve", "config": cfg.to_dict()})

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # end of output: the worker has exited

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # it died already: the next wait reads how
            pass

    def ready(self, should_stop: Callable[[], bool]) -> dict:
        """Wait until the model is loaded and warm (untimed); {"pid", "peak_rss_mb"}."""
        return self._await(should_stop)

    def repeat(self, labels: dict, should_stop: Callable[[], bool], phase: str = "timed") -> dict:
        """One call (timed, or an uncounted warm-up); its raw sample, labelled (pass, position) for the record."""
        self._send({"op": "repeat", "labels": labels, "phase": phase})
        return self._await(should_stop)["sample"]

    def finish(self, should_stop: Callable[[], bool]) -> ChildOutcome:
        """Close the worker; its outcome carries every sample it took and what took effect."""
        self._send({"op": "finish"})
        try:
            self._await(should_stop)
        except WorkerEnded as ended:
            return ended.outcome
        self.kill()
        return ChildOutcome("error", "the worker answered `finish` with a sample", {}, self.elapsed_s)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def _await(self, should_stop: Callable[[], bool], poll_s: float = 0.1) -> dict:
        """The next message; raises WorkerEnded with the outcome if the worker ends (or is ended) first."""
        t0 = time.monotonic()
        while True:
            if should_stop():
                self._end("cancelled", "stopped by the user while this cell ran")
            if time.monotonic() - t0 > self.cfg.timeout_s:  # per load or call: a pass is many cells' calls
                self._end("timeout", f"killed after exceeding the per-cell timeout of {self.cfg.timeout_s:g} s")
            try:
                line = self._lines.get(timeout=poll_s)
            except queue.Empty:
                continue
            if line is None:
                self._ended()
            if line.startswith(PASS_MARKER):
                return json.loads(line[len(PASS_MARKER):])
            if line.startswith(RESULT_MARKER):
                self._ended(json.loads(line[len(RESULT_MARKER):]))

    def _end(self, status: str, reason: str):
        self.kill()
        raise WorkerEnded(ChildOutcome(status, reason, {}, self.elapsed_s))

    def _ended(self, payload: dict | None = None):
        self.proc.wait()
        self._stderr.seek(0)
        stderr = self._stderr.read()
        self._stderr.close()
        if payload is None:
            raise WorkerEnded(ChildOutcome("crashed", _death_reason(self.proc.returncode, stderr), {},
                                           self.elapsed_s, stderr))
        raise WorkerEnded(ChildOutcome(payload.get("status", "error"), payload.get("reason", ""), payload,
                                       self.elapsed_s, stderr))

    def kill(self) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
        if not self._stderr.closed:
            self._stderr.close()


# ----------------------------------------------------------------------------------------------
# Events and the sweep runner


@dataclass(frozen=True)
class SweepEvent:
    sweep_id: int


@dataclass(frozen=True)
class SweepStarted(SweepEvent):
    total: int  # cells in the sweep
    pending: int  # cells still to measure (fewer on --resume)
    environment: dict
    resumed: bool = False


@dataclass(frozen=True)
class CellStarted(SweepEvent):
    index: int  # 0-based position in the expanded grid
    total: int
    config: RunConfig
    eta_s: float | None  # estimated time left for the sweep, this cell included


@dataclass(frozen=True)
class CellFinished(SweepEvent):
    index: int
    total: int
    result: CellResult
    done: int  # cells finished so far, resumed ones included
    eta_s: float | None


@dataclass(frozen=True)
class SweepPlanned(SweepEvent):
    plan: str  # how the passes run: how many, which workers stay loaded and which are reloaded (and why)


@dataclass(frozen=True)
class PassStarted(SweepEvent):
    pass_no: int  # 0-based
    passes: int
    order: tuple[int, ...]  # grid indices of the cells, in the (random) order this pass measures them


@dataclass(frozen=True)
class FidelityStarted(SweepEvent):
    device: str
    engine: str
    precision: str


@dataclass(frozen=True)
class FidelityFinished(SweepEvent):
    record: dict  # device, engine, precision, status, hidden_rel_err, token_match, ...


@dataclass(frozen=True)
class QualityStarted(SweepEvent):
    what: str  # "speaking <device engine precision>" or "scoring <n> configurations"


@dataclass(frozen=True)
class QualityFinished(SweepEvent):
    columns: dict  # config key ("device|engine|precision") -> the quality columns its cells now carry


@dataclass(frozen=True)
class SweepFinished(SweepEvent):
    status: str  # finished / cancelled (an exception or closing the generator leaves it `interrupted`)
    results: tuple[CellResult, ...]
    fidelity: tuple[dict, ...]
    drift: dict | None = None  # chattts_lab.compare.Drift.as_dict(): drift_pct, noisy, the sentence to show


def run_sweep(spec: SweepSpec | None, db_path: str | Path, should_stop: Callable[[], bool] | None = None,
              resume: int | None = None, python: str | None = None,
              memory_allowance_mb: float | None = None) -> Iterator[SweepEvent]:
    """Run (or with `resume=sweep_id`, finish) a sweep, committing each cell to the store as it ends.

    `should_stop` is polled between cells and while a cell runs; when it returns True the running
    cell is killed and kept as `cancelled`, and the sweep ends as `cancelled` (resumable). With
    `spec.passes` > 1 and more than one cell to measure, the cells run in interleaved passes (each
    cell's worker loaded once, as many at a time as fit in `memory_allowance_mb`, by default a share
    of the memory available now); a stop then keeps every unfinished cell as `cancelled`.
    """
    store = Store(db_path)
    if resume is not None:
        sweep = store.sweep(resume)
        if sweep is None:
            raise SpecError(f"no sweep {resume} in {db_path}")
        if sweep["origin"] != "local":  # measuring here would mix this machine's numbers into another's sweep
            raise SpecError(f"sweep {resume} was imported from another machine; it cannot be resumed here")
        spec = SweepSpec.from_dict(sweep["spec"])
        sweep_id, environment = resume, sweep["environment"]
        store.set_status(sweep_id, "running")
    else:
        if spec is None:
            raise SpecError("run_sweep needs a spec or a sweep to resume")
        spec.validate()
        if spec.cluster:
            cluster.check_cluster(spec)  # an unreachable cluster or an unknown label: refused before the sweep exists
        # A cluster's cells run elsewhere: the head's own bandwidth would be no floor for them.
        environment = {**capture_environment(), **({} if spec.cluster else measure_read_bandwidth(spec.devices))}
        sweep_id = store.create_sweep(spec.to_dict(), environment)
    configs = spec.expand()
    done = {r.config.key: r for r in store.results(sweep_id) if r.status in DONE_STATUSES}
    pending = [(i, c) for i, c in enumerate(configs) if c.key not in done]
    yield SweepStarted(sweep_id, len(configs), len(pending), environment, resumed=resume is not None)

    stop = should_stop or (lambda: False)
    status = "interrupted"
    runnable = [(i, c) for i, c in pending if cell_rule(c) is None]
    passes = spec.interleaved_passes(len(runnable))
    try:
        if spec.cluster:
            status = yield from _run_on_cluster(sweep_id, pending, len(configs), store, spec, stop)
        elif passes > 1:
            status = yield from _run_ruled_then_interleaved(sweep_id, pending, len(configs), store, spec, stop,
                                                            python, memory_allowance_mb, environment)
        else:
            status = yield from _run_one_by_one(sweep_id, pending, len(configs), store, stop, python, environment)
        if status == "finished":
            if spec.fidelity:
                yield from _run_fidelity(spec, sweep_id, store, stop, python)
            if spec.quality and not stop():
                from chattts_lab.quality.sweep import run_quality

                yield from run_quality(spec, sweep_id, store, stop, python, Path(db_path).parent / "quality")
            status = "cancelled" if stop() else "finished"
    finally:
        store.set_status(sweep_id, status)
        store.close()
    final = Store(db_path)
    try:
        results = tuple(final.results(sweep_id))
        fid = tuple(final.fidelity(sweep_id))
        drift = sweep_drift(results, spec.drift_threshold_pct).as_dict()
        final.set_note(sweep_id, "drift", drift)  # kept with the sweep: the history lists it without the samples
    finally:
        final.close()
    yield SweepFinished(sweep_id, status, results, fid, drift)


# ----------------------------------------------------------------------------------------------
# Interleaved passes: every cell's worker stays loaded; each pass makes one timed call of each cell


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
    elapsed_s: float = 0.0
    done: bool = False

    def start(self, python: str | None, stop: Callable[[], bool]) -> dict:
        self.worker = CellWorker(self.cfg, python)
        ready = self.worker.ready(stop)
        self.pids.append(ready["pid"])
        return ready

    def close(self, outcome: ChildOutcome) -> None:
        """Keep what the worker gave back (a worker that died sent no payload: its streamed samples stand in)."""
        payload = outcome.payload if "samples" in outcome.payload else {**outcome.payload, "samples": self.live}
        self.payloads.append(payload)
        self.live, self.elapsed_s, self.worker = [], self.elapsed_s + outcome.elapsed_s, None

    def result(self, outcome: ChildOutcome) -> CellResult:
        """The cell's row: the statistics of every pass, the effective settings of its last worker."""
        first, last = (self.payloads[0], self.payloads[-1]) if self.payloads else ({}, {})
        payload = {**first, "effective": last.get("effective") or first.get("effective"),
                   "traceback": last.get("traceback", ""),
                   "samples": [s for p in self.payloads for s in p.get("samples", [])],
                   "extra": {**(first.get("extra") or {}), "worker_pids": self.pids}}
        merged = ChildOutcome(outcome.status, outcome.reason, payload, self.elapsed_s, outcome.stderr)
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
    text = (f"{passes} interleaved passes over {cells} cells, a fresh random order each pass; each pass makes one "
            f"timed call of every cell. ")
    if resident == cells:
        return text + (f"Every cell's worker stays loaded between passes (about {per_worker_mb:.0f} MB each), and "
                       "makes one more untimed call once all are loaded.")
    return text + (f"{resident} worker(s) stay loaded and {cells - resident} are loaded again before their turn in "
                   f"each pass: about {per_worker_mb:.0f} MB a worker, {allowance_mb:.0f} MB allowed for all. "
                   "Loading, the cold call and warm-up are never timed.")


def _run_interleaved(sweep_id: int, cells: list[_Cell], total: int, n_done: int, store: Store, passes: int,
                     stop: Callable[[], bool], python: str | None, allowance_mb: float | None,
                     environment: dict) -> Iterator[SweepEvent]:
    """Load every cell that fits, run the passes, commit each cell when it ends (its last pass or its failure).

    Returns (as the generator's value) `cancelled` when stopped, else `finished`.
    """
    allowance = allowance_mb if allowance_mb is not None else (
        psutil.virtual_memory().available / 2**20 * MEMORY_HEADROOM)

    def end(cell: _Cell, outcome: ChildOutcome) -> CellFinished:
        nonlocal n_done
        if cell.worker is not None:
            cell.close(outcome)
        cell.done = True
        result = with_bandwidth(cell.result(outcome), environment)
        store.add_cell(sweep_id, cell.index, result)
        n_done += result.status != "cancelled"
        return CellFinished(sweep_id, cell.index, total, result, n_done, None)

    def cancel_all(reason: str) -> Iterator[CellFinished]:
        for cell in cells:
            if not cell.done:
                if cell.worker is not None:
                    cell.worker.kill()
                yield end(cell, ChildOutcome("cancelled", reason, {}, cell.worker.elapsed_s if cell.worker else 0.0))

    loaded_mb: list[float] = []
    try:
        for cell in cells:  # load in grid order while the workers fit (the first always loads: it sizes the rest)
            if loaded_mb and sum(loaded_mb) + max(loaded_mb) > allowance:
                break
            yield CellStarted(sweep_id, cell.index, total, cell.cfg, None)
            try:
                loaded_mb.append(cell.start(python, stop)["peak_rss_mb"])
            except WorkerEnded as ended:
                if ended.outcome.status == "cancelled":
                    yield from cancel_all(ended.outcome.reason)
                    return "cancelled"
                yield end(cell, ended.outcome)
        alive = [c for c in cells if c.worker is not None]
        keep = memory_plan(loaded_mb, len([c for c in cells if not c.done]), allowance)
        for cell in cells:
            cell.resident = cell in alive[:keep]
        for cell in alive[keep:]:  # loaded to size the others, but not staying: closed until its turn
            outcome = cell.worker.finish(stop)
            cell.close(outcome)
            if outcome.status != "ok":
                yield end(cell, outcome)
        plan = plan_sentence(passes, len(cells), keep, allowance, max(loaded_mb, default=0.0))
        store.set_note(sweep_id, "plan", plan)
        yield SweepPlanned(sweep_id, plan)

        def one_call(cell: _Cell, labels: dict, phase: str = "timed") -> Iterator[CellFinished]:
            """The cell's call of this pass, loading its worker first if it is not resident; a failure ends it."""
            try:
                if cell.worker is None:
                    if not cell.pids:
                        yield CellStarted(sweep_id, cell.index, total, cell.cfg, None)
                    cell.start(python, stop)
                sample = cell.worker.repeat(labels, stop, phase)
                if phase == "timed":
                    cell.live.append(sample)
                if not cell.resident:
                    outcome = cell.worker.finish(stop)
                    cell.close(outcome)
                    if outcome.status != "ok":
                        yield end(cell, outcome)
            except WorkerEnded as ended:
                if ended.outcome.status == "cancelled":
                    raise
                yield end(cell, ended.outcome)

        try:
            # Loading the later workers evicts what the earlier ones had warm (their mmapped weights, caches):
            # one untimed call of every resident cell, now that all are loaded, pays for that outside the passes.
            for cell in [c for c in cells if c.resident and c.worker is not None]:
                yield from one_call(cell, {"pass": "warm"}, "warmup")
            rng, orders, order = random.Random(), [], []
            for pass_no in range(passes):
                order = pass_order(rng, [c for c in cells if not c.done], order)
                if not order:
                    break
                orders.append([c.index for c in order])
                store.set_note(sweep_id, "pass_orders", orders)
                _read_bandwidth_again(sweep_id, store, environment, "pass")  # the floor is read as the cells are timed
                yield PassStarted(sweep_id, pass_no, passes, tuple(c.index for c in order))
                for position, cell in enumerate(order):
                    yield from one_call(cell, {"pass": pass_no, "position": position})
        except WorkerEnded as ended:
            yield from cancel_all(ended.outcome.reason)
            return "cancelled"
        for cell in cells:
            if cell.done:
                continue
            outcome = cell.worker.finish(stop) if cell.worker is not None else None
            if outcome is not None:
                cell.close(outcome)
            last = cell.payloads[-1]
            yield end(cell, outcome or ChildOutcome(last.get("status", "ok"), last.get("reason", ""), last, 0.0))
    finally:  # an exception or the generator closed: never leave a worker behind
        for cell in cells:
            if cell.worker is not None:
                cell.worker.kill()
    return "finished"


def _run_one_by_one(sweep_id: int, pending: list, total: int, store: Store, stop: Callable[[], bool],
                    python: str | None, environment: dict) -> Iterator[SweepEvent]:
    """Each cell in its own fresh process, one after another (passes == 1); returns finished or cancelled."""
    durations: list[float] = []
    n_done = total - len(pending)
    start_read_unused = n_done == 0  # a fresh sweep's read at its start serves its first cell
    for pos, (index, cfg) in enumerate(pending):
        if stop():
            return "cancelled"
        runnable_left = sum(1 for _, c in pending[pos:] if cell_rule(c) is None)
        yield CellStarted(sweep_id, index, total, cfg, _eta(durations, runnable_left))
        bandwidth = environment
        if cell_rule(cfg) is None:  # a cell that runs: its floor is the bandwidth read just before it
            if not start_read_unused:
                bandwidth = _read_bandwidth_again(sweep_id, store, environment, "cell")
            start_read_unused = False
        result = with_bandwidth(run_cell(cfg, should_stop=stop, python=python), bandwidth)
        store.add_cell(sweep_id, index, result)
        if cell_rule(cfg) is None:
            durations.append(result.elapsed_s)
        n_done += result.status != "cancelled"
        yield CellFinished(sweep_id, index, total, result, n_done, _eta(durations, runnable_left - 1))
        if result.status == "cancelled":
            return "cancelled"
    return "finished"


def _read_bandwidth_again(sweep_id: int, store: Store, environment: dict, before: str) -> dict:
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


def _run_ruled_then_interleaved(sweep_id: int, pending: list, total: int, store: Store, spec: SweepSpec,
                                stop: Callable[[], bool], python: str | None,
                                memory_allowance_mb: float | None, environment: dict) -> Iterator[SweepEvent]:
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
    return (yield from _run_interleaved(sweep_id, cells, total, n_done, store, spec.passes, stop, python,
                                        memory_allowance_mb, environment))


def _eta(durations: list[float], cells_left: int) -> float | None:
    if not durations or cells_left <= 0:
        return 0.0 if cells_left <= 0 else None
    return sum(durations) / len(durations) * cells_left


# ----------------------------------------------------------------------------------------------
# A fleet sweep: every cell a Ray task on a cluster node (chattts_lab.cluster places and collects them)


def _run_on_cluster(sweep_id: int, pending: list, total: int, store: Store, spec: SweepSpec,
                    stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[SweepEvent]:
    """Submit every pending cell, commit each row as its task ends. Returns `cancelled` when stopped, `interrupted`
    when a cell was lost with its node (resume measures it again), else `finished`."""
    ray = cluster.connect(spec.cluster)
    nodes, pool = cluster.live_nodes(ray), cluster.TaskPool(ray)
    n_done, lost = total - len(pending), 0

    def finished(index: int, result: CellResult) -> CellFinished:
        nonlocal n_done, lost
        store.add_cell(sweep_id, index, result)
        n_done, lost = n_done + (result.status not in ("lost", "cancelled")), lost + (result.status == "lost")
        return CellFinished(sweep_id, index, total, result, n_done, None)

    try:
        for index, cfg in pending:
            yield CellStarted(sweep_id, index, total, cfg, None)
            ruled = cluster.unplaceable(cfg, nodes)  # Ray would queue it forever: a row with the reason instead
            if ruled:
                yield finished(index, CellResult(cfg, *ruled, node=_label_only(cfg)))
            else:
                pool.submit(measure_on_node, cfg.to_dict(), (index, cfg), **cluster.placement(cfg))
        plan = (f"{len(pool)} cell(s) as Ray tasks on {cluster.describe(ray, nodes)}; each in a fresh worker process "
                "on its node, with the CPUs of its threads to itself, its timed calls back to back.")
        store.set_note(sweep_id, "plan", plan)
        yield SweepPlanned(sweep_id, plan)
        while len(pool):
            if stop():
                for index, cfg in pool.cancel_all():
                    yield finished(index, CellResult(cfg, "cancelled", "stopped by the user while this cell ran or "
                                                     "waited for its node", node=_label_only(cfg)))
                return "cancelled"
            for end in pool.ended(poll_s):
                yield finished(end.tag[0], fleet_result(end))
    finally:  # an exception or the generator closed: no task keeps measuring for a sweep that is gone
        pool.cancel_all()
    return "interrupted" if lost else "finished"


def fleet_result(end) -> CellResult:
    """A cell's row from how its task ended: its own row, or why there is none."""
    cfg = end.tag[1]
    if end.failure is None:
        return CellResult.from_dict(end.value)
    if end.failure == "raised":  # the lab's code failed on the node, outside the worker: a bug, with its traceback
        return CellResult(cfg, "error", f"the cell's Ray task raised {end.reason}"[:800], traceback=end.detail[-4000:],
                          node=_label_only(cfg))
    if end.failure == "oom":
        return CellResult(cfg, "oom", f"Ray killed the cell's task, its node short of memory ({end.reason})"[:800],
                          node=_label_only(cfg))
    where = f"node {cfg.node!r}" if cfg.node else "its node"
    return CellResult(cfg, "lost", f"{where} was lost while the cell ran ({end.reason})"[:800], node=_label_only(cfg))


def _label_only(cfg: RunConfig) -> dict:
    return {"label": cfg.node} if cfg.node else {}


def measure_on_node(config: dict) -> dict:
    """A Ray task on a cluster node: the cell measured there, and where it ran (a CellResult as a dict)."""
    cfg = RunConfig.from_dict(config)
    node: dict = {}

    def note_node() -> None:  # imports torch for the environment: done while the worker loads, never while timed
        node.update(cluster.node_here(cfg.node))

    result = measure_back_to_back(cfg, while_loading=note_node)
    if not node:  # a cell the rule table stopped started no worker
        note_node()
    return replace(result, node=node).to_dict()


def measure_back_to_back(cfg: RunConfig, while_loading: Callable[[], None] = lambda: None,
                         never: Callable[[], bool] = lambda: False) -> CellResult:
    """The rule table judged here (this machine's devices and cores), else one fresh CellWorker: loaded and warmed
    up (`while_loading` runs meanwhile, untimed), then `repeats` timed calls for at least `min_time_s`, one after
    another."""
    ruled = cell_rule(cfg)
    if ruled:
        return CellResult(cfg, *ruled)
    worker = CellWorker(cfg)
    try:
        while_loading()
        ready = worker.ready(never)
        cluster.hold_if_asked(cfg, ready["pid"])
        repeat_until(lambda: worker.repeat({}, never), cfg.repeats, cfg.min_time_s, cfg.max_repeats)
        outcome = worker.finish(never)
    except WorkerEnded as ended:
        outcome = ended.outcome
    finally:
        worker.kill()
    return result_of(cfg, outcome)


def _run_fidelity(spec: SweepSpec, sweep_id: int, store, stop, python) -> Iterator[SweepEvent]:
    """Drift of each (device, engine, precision) from fp32 stock, one fresh process each, once per sweep."""
    have = {(f["device"], f["engine"], f["precision"]) for f in store.fidelity(sweep_id)
            if f.get("status") != "cancelled"}
    threads = spec.fidelity_threads()
    for device, engine, precision in spec.fidelity_pairs():
        if (device, engine, precision) in have or stop():
            continue
        cfg = RunConfig(spec.model, device, precision, 1, threads, spec.fidelity_tokens, engine)
        base = {"device": device, "engine": engine, "precision": precision, "tokens": spec.fidelity_tokens}
        is_reference = (engine, precision) == ("stock", "fp32")
        absent = absent_device_reason(cfg)
        ruled = ("skipped", absent) if absent else (None if is_reference else cell_rule(cfg))
        if ruled:
            record = {**base, "status": ruled[0], "reason": ruled[1]}
        elif is_reference:
            record = {**base, "status": "ok", "reason": "the fp32 stock reference itself",
                      "hidden_rel_err": 0.0, "token_match": 1.0, "first_divergence": None}
        else:
            yield FidelityStarted(sweep_id, device, engine, precision)
            task = {"kind": "fidelity", "config": cfg.to_dict()}
            outcome = run_child(task, spec.timeout_s, threads, stop, python)
            record = {**base, **outcome.payload.get("fidelity", {}), "status": outcome.status,
                      "reason": outcome.reason}
        store.add_fidelity(sweep_id, record)
        yield FidelityFinished(sweep_id, record)


def resumable_sweep(db_path: str | Path) -> int | None:
    """The most recent sweep of this machine that did not finish (interrupted or cancelled), if any."""
    store = Store(db_path)
    try:
        for sweep in store.sweeps_list():
            if (sweep["status"] in ("interrupted", "cancelled") and sweep["origin"] == "local"
                    and sweep["spec"].get("kind", "sweep") == "sweep"):  # a serving run is run again, not resumed
                return sweep["id"]
    finally:
        store.close()
    return None

