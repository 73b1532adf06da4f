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
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from chattts_lab.env import capture_environment
from chattts_lab.limits import crash_under_budget
from chattts_lab.results import DONE_STATUSES, RESULT_MARKER, CellResult, RunConfig, summarize
from chattts_lab.roofline import measure_read_bandwidth, with_bandwidth
from chattts_lab.spec import SpecError, SweepSpec, absent_device_reason, cell_rule
from chattts_lab.store import Store

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
class FidelityStarted(SweepEvent):
    device: str
    engine: str
    precision: str


@dataclass(frozen=True)
class FidelityFinished(SweepEvent):
    record: dict  # device, engine, precision, status, hidden_rel_err, token_match, ...


@dataclass(frozen=True)
class SweepFinished(SweepEvent):
    status: str  # finished / cancelled (an exception or closing the generator leaves it `interrupted`)
    results: tuple[CellResult, ...]
    fidelity: tuple[dict, ...]


def run_sweep(spec: SweepSpec | None, db_path: str | Path, should_stop: Callable[[], bool] | None = None,
              resume: int | None = None, python: str | None = None) -> Iterator[SweepEvent]:
    """Run (or with `resume=sweep_id`, finish) a sweep, committing each cell to the store as it ends.

    `should_stop` is polled between cells and while a cell runs; when it returns True the running
    cell is killed and kept as `cancelled`, and the sweep ends as `cancelled` (resumable).
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
        environment = {**capture_environment(), **measure_read_bandwidth(spec.devices)}
        sweep_id = store.create_sweep(spec.to_dict(), environment)
    configs = spec.expand()
    done = {r.config.key: r for r in store.results(sweep_id) if r.status in DONE_STATUSES}
    pending = [(i, c) for i, c in enumerate(configs) if c.key not in done]
    yield SweepStarted(sweep_id, len(configs), len(pending), environment, resumed=resume is not None)

    stop = should_stop or (lambda: False)
    status = "interrupted"
    durations: list[float] = []
    n_done = len(configs) - len(pending)
    try:
        for pos, (index, cfg) in enumerate(pending):
            if stop():
                status = "cancelled"
                break
            runnable_left = sum(1 for _, c in pending[pos:] if cell_rule(c) is None)
            eta = _eta(durations, runnable_left)
            yield CellStarted(sweep_id, index, len(configs), cfg, eta)
            result = with_bandwidth(run_cell(cfg, should_stop=stop, python=python), environment)
            store.add_cell(sweep_id, index, result)
            if cell_rule(cfg) is None:
                durations.append(result.elapsed_s)
            n_done += result.status != "cancelled"
            yield CellFinished(sweep_id, index, len(configs), result, n_done, _eta(durations, runnable_left - 1))
            if result.status == "cancelled":
                status = "cancelled"
                break
        else:
            if spec.fidelity:
                yield from _run_fidelity(spec, sweep_id, store, stop, python)
            status = "cancelled" if stop() else "finished"
    finally:
        store.set_status(sweep_id, status)
        store.close()
    final = Store(db_path)
    try:
        results = tuple(final.results(sweep_id))
        fid = tuple(final.fidelity(sweep_id))
    finally:
        final.close()
    yield SweepFinished(sweep_id, status, results, fid)


def _eta(durations: list[float], cells_left: int) -> float | None:
    if not durations or cells_left <= 0:
        return 0.0 if cells_left <= 0 else None
    return sum(durations) / len(durations) * cells_left


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
            if sweep["status"] in ("interrupted", "cancelled") and sweep["origin"] == "local":
                return sweep["id"]
    finally:
        store.close()
    return None

