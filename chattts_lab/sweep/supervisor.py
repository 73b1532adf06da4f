"""The one supervisor of a sweep's worker processes (`chattts_lab.sweep.worker.main`, each forked from a server that
has imported torch and ChatTTS once: chattts_lab.sweep.launcher): a one-shot task
(`run_child`, `run_cell`), a cell's worker kept loaded between passes or calls (`CellWorker`), and a cell's row from
what its worker gave back (`result_of`). Every wait watches the clock and the stop flag; nothing is left running.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from chattts_lab.limits import crash_under_budget
from chattts_lab.sweep.launcher import ForkedWorker
from chattts_lab.trackers.measure import repeat_until
from chattts_lab.sweep.results import PASS_MARKER, RESULT_MARKER, CellResult, RunConfig, summarize
from chattts_lab.sweep.spec import cell_rule

log = logging.getLogger(__name__)
WORKER_ENTRY = "chattts_lab.sweep.worker:main"  # module:function each worker runs (tests swap in a stand-in)
STDERR_KEPT_CHARS = 4000  # what a crashed cell keeps of its worker's stderr (the end, where the error is)


# ----------------------------------------------------------------------------------------------
# Running one cell in a fresh process


def worker_env(threads: int | None) -> dict:
    """The worker's environment: its own thread counts (what the row records; the pools themselves are sized when
    the worker loads its model, since torch was imported before the fork), offline, its parent named."""
    env = dict(os.environ)
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(threads)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["CHATTTS_LAB_PARENT_PID"] = str(os.getpid())  # dies with us (worker.main; forked ones: launcher._die_with)
    return env


@dataclass
class ChildOutcome:
    status: str  # ok / error / oom / ... as the worker says, or crashed / cancelled from the parent
    reason: str
    payload: dict
    elapsed_s: float
    stderr: str = ""


def run_child(task: dict, timeout_s: float, threads: int | None = None,
              should_stop: Callable[[], bool] | None = None) -> ChildOutcome:
    """Run a worker on one task (a JSON object on its stdin) and read its result."""
    worker = WorkerProcess(task, timeout_s, threads)
    try:
        worker.next_message(should_stop or (lambda: False))  # a one-shot task answers with its result alone
    except WorkerEnded as ended:
        return ended.outcome
    finally:
        worker.kill()
    return ChildOutcome("error", "the worker answered a one-shot task with a pass sample", {}, worker.busy_s)


def _kill(proc: ForkedWorker) -> None:
    proc.kill()  # its whole process group
    proc.wait()


def _death_reason(returncode: int, stderr: str) -> str:
    tail = " | ".join(line.strip() for line in stderr.strip().splitlines()[-3:])
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else -returncode
        hint = " (the kernel's out-of-memory killer sends SIGKILL)" if returncode == -signal.SIGKILL else ""
        why = f"worker killed by {sig}{hint}"
    else:
        why = f"worker exited with code {returncode} without a result"
    return f"{why}: {tail}" if tail else why


def run_cell(cfg: RunConfig, should_stop: Callable[[], bool] | None = None) -> CellResult:
    """Measure one cell: a rule row if it must not run, else a fresh worker process."""
    ruled = cell_rule(cfg)
    if ruled:
        return CellResult(cfg, ruled[0], ruled[1])
    outcome = run_child({"kind": "cell", "config": cfg.to_dict()}, cfg.timeout_s, cfg.threads, should_stop)
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
# The one supervisor of a worker process


class WorkerEnded(Exception):
    """The worker ended (finished, failed, died, timed out or was stopped): `outcome` says how."""

    def __init__(self, outcome: ChildOutcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


class WorkerProcess:
    """One worker process (chattts_lab.sweep.launcher), spoken to in JSON lines: the first line on its stdin is its
    task.

    A one-shot task (`cell`, `fidelity`, ...) answers with its result line; a `serve` task (CellWorker) stays
    loaded and answers one line per command. A reader thread moves its stdout lines into a queue so that every
    wait also watches the clock (`timeout_s` per wait) and the stop flag. Its stderr goes to a temporary file
    (kept for a crash's traceback; the worker unlinks its name once open). `busy_s` is the wall time the worker spent on what it was asked.
    """

    def __init__(self, task: dict, timeout_s: float, threads: int | None = None):
        self.timeout_s = timeout_s
        self.busy_s = 0.0
        fd, self._stderr_path = tempfile.mkstemp(prefix="chattts-lab-worker-", suffix=".stderr")
        self._stderr = os.fdopen(fd, "w+")
        self.proc = ForkedWorker(WORKER_ENTRY, worker_env(threads), self._stderr_path)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send(task)

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

    def next_message(self, should_stop: Callable[[], bool], poll_s: float = 0.1) -> dict:
        """The next message; raises WorkerEnded with the outcome if the worker ends (or is ended) first."""
        t0 = time.monotonic()
        try:
            return self._wait(should_stop, t0, poll_s)
        except WorkerEnded as ended:
            ended.outcome.elapsed_s += time.monotonic() - t0  # the wait that ended it was this cell's too
            raise
        finally:
            self.busy_s += time.monotonic() - t0  # the worker worked for this cell until it answered

    def _wait(self, should_stop: Callable[[], bool], t0: float, poll_s: float) -> dict:
        while True:
            if should_stop():
                self._end("cancelled", "stopped by the user while this cell ran")
            if time.monotonic() - t0 > self.timeout_s:  # per load or call: a pass is many cells' calls
                self._end("timeout", f"killed after exceeding the per-cell timeout of {self.timeout_s:g} s")
            try:
                line = self._lines.get(timeout=poll_s)
            except queue.Empty:
                continue
            if line is None:
                self._ended()
            if line.startswith(PASS_MARKER):
                return json.loads(line[len(PASS_MARKER):])
            if line.startswith(RESULT_MARKER):
                try:
                    payload = json.loads(line[len(RESULT_MARKER):])
                except json.JSONDecodeError:  # a result cut short: the worker died writing it
                    payload = None
                self._ended(payload)

    def _end(self, status: str, reason: str):
        self.kill()
        raise WorkerEnded(ChildOutcome(status, reason, {}, self.busy_s))

    def _ended(self, payload: dict | None = None):
        self.proc.wait()
        self._stderr.seek(0)
        stderr = self._stderr.read()
        self._close_stderr()
        if payload is None:
            raise WorkerEnded(ChildOutcome("crashed", _death_reason(self.proc.returncode, stderr), {},
                                           self.busy_s, stderr))
        raise WorkerEnded(ChildOutcome(payload.get("status", "error"), payload.get("reason", ""), payload,
                                       self.busy_s, stderr))

    def kill(self) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
        self._close_stderr()

    def _close_stderr(self) -> None:
        if not self._stderr.closed:
            self._stderr.close()
            Path(self._stderr_path).unlink(missing_ok=True)  # the worker unlinks it once open; not if it died first


class CellWorker(WorkerProcess):
    """One cell's worker kept alive between passes (interleaved sweeps) or for back-to-back calls (fleet cells):
    its `serve` task, then `repeat` and `finish` commands.

    Between passes the worker idles while the other cells are timed; that wait is no cost of this cell (so the
    row's `elapsed_s` and the estimates made from it are what the cell really took, not the sweep's length).
    """

    def __init__(self, cfg: RunConfig):
        super().__init__({"kind": "serve", "config": cfg.to_dict()}, cfg.timeout_s, cfg.threads)
        self.cfg = cfg

    def ready(self, should_stop: Callable[[], bool]) -> dict:
        """Wait until the model is loaded and warm (untimed); {"pid", "peak_rss_mb"}."""
        return self.next_message(should_stop)

    def repeat(self, labels: dict, should_stop: Callable[[], bool], phase: str = "timed") -> dict:
        """One call (timed, or an uncounted warm-up); its raw sample, labelled (pass, position) for the record."""
        self._send({"op": "repeat", "labels": labels, "phase": phase})
        return self.next_message(should_stop)["sample"]

    def finish(self, should_stop: Callable[[], bool]) -> ChildOutcome:
        """Close the worker; its outcome carries every sample it took and what took effect."""
        self._send({"op": "finish"})
        try:
            self.next_message(should_stop)
        except WorkerEnded as ended:
            return ended.outcome
        self.kill()
        return ChildOutcome("error", "the worker answered `finish` with a sample", {}, self.busy_s)


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
        worker.ready(never)
        repeat_until(lambda: worker.repeat({}, never), cfg.repeats, cfg.min_time_s, cfg.max_repeats)
        outcome = worker.finish(never)
    except WorkerEnded as ended:
        outcome = ended.outcome
    finally:
        worker.kill()
    return result_of(cfg, outcome)
