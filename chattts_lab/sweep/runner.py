"""Running a sweep: each cell in a fresh worker process, every result committed to the store as it ends.

    SweepSpec --expand()--> [RunConfig] --cell_rule() or a fresh worker process--> CellResult --> Store

`run_sweep` is a generator of progress events, so a command line can draw a progress bar and a UI can
show a live table and stop the sweep between (or during) cells without losing finished rows:

    for event in run_sweep(spec, "results/lab.sqlite", should_stop=lambda: stop_clicked):
        if isinstance(event, CellFinished): show(event.result.row())

The types live apart (chattts_lab.sweep.results, chattts_lab.sweep.spec) so the store and the reports need not
import this runner; statistics are derived from the worker's raw samples by `results.summarize`. The workers are
supervised by chattts_lab.sweep.supervisor; interleaved passes are chattts_lab.sweep.interleave's, fleet sweeps
chattts_lab.sweep.fleet's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterator

from chattts_lab import engines
from chattts_lab.sweep import cluster

from chattts_lab.sweep import fleet

from chattts_lab.sweep import interleave
from chattts_lab.history.compare import sweep_drift
from chattts_lab.trackers.env import capture_environment
from chattts_lab.sweep.results import DONE_STATUSES, RunConfig
from chattts_lab.trackers.roofline import measure_read_bandwidth, with_bandwidth
from chattts_lab.sweep.spec import SpecError, SweepSpec, absent_device_reason, cell_rule, pairs_with_runnable_cells
from chattts_lab.history.store import Store
from chattts_lab.sweep.supervisor import run_cell, run_child
from chattts_lab.sweep.events import (CallTimed, CellFinished, CellStarted, FidelityFinished, FidelityStarted,
                                      PassStarted, QualityFinished, QualityStarted, SweepEvent, SweepFinished,
                                      SweepPlanned, SweepStarted)

__all__ = ["run_sweep", "resumable_sweep", "resume_refusal", "unused_settings", "run_cell", "SweepEvent",
           "SweepStarted", "SweepPlanned", "PassStarted", "CallTimed", "CellStarted", "CellFinished", "FidelityStarted",
           "FidelityFinished", "QualityStarted", "QualityFinished", "SweepFinished"]

log = logging.getLogger(__name__)


def unused_settings(spec: SweepSpec) -> str:
    """A sentence naming the measurement settings this sweep will not use, else ''.

    An interleaved sweep (the default: passes > 1 over more than one runnable cell, not on a cluster) times each
    cell once per pass, so `repeats` and `min_time_s` (the back-to-back protocol of passes == 1) do nothing.
    """
    if spec.interleaved_passes(sum(1 for c in spec.expand() if cell_rule(c) is None)) <= 1:
        return ""
    unused = [f"repeats {spec.repeats}"] * (spec.repeats != spec.passes)
    unused += [f"min time {spec.min_time_s:g} s"] * (spec.min_time_s not in (0, SweepSpec.min_time_s))
    if not unused:
        return ""
    return (f"{' and '.join(unused)} not used: this interleaved sweep times each cell once per pass, {spec.passes} "
            f"timed calls in all (set passes to the calls you want, or passes 1 to time each cell's repeats back "
            "to back in its own process)")


def run_sweep(spec: SweepSpec | None, db_path: str | Path, should_stop: Callable[[], bool] | None = None,
              resume: int | None = None,
              memory_allowance_mb: float | None = None) -> Iterator[SweepEvent]:
    """Run (or with `resume=sweep_id`, finish) a sweep, committing each cell to the store as it ends.

    `should_stop` is polled between cells and while a cell runs; when it returns True the running
    cell is killed and kept as `cancelled`, and the sweep ends as `cancelled` (resumable). With
    `spec.passes` > 1 and more than one cell to measure, the cells run in interleaved passes (each
    cell's worker loaded once, as many at a time as fit in `memory_allowance_mb`, by default a share
    of the memory available now); a stop then keeps every unfinished cell as `cancelled`.
    """
    store = Store(db_path)
    spec, sweep_id, environment = _open(store, spec, resume, db_path)
    configs = spec.expand()
    done = {r.config.key: r for r in store.results(sweep_id) if r.status in DONE_STATUSES}
    pending = [(i, c) for i, c in enumerate(configs) if c.key not in done]
    yield SweepStarted(sweep_id, len(configs), len(pending), environment, resumed=resume is not None)

    stop = should_stop or (lambda: False)
    status = "interrupted"
    passes = spec.interleaved_passes(sum(1 for _, c in pending if cell_rule(c) is None))
    try:
        if spec.cluster:
            status = yield from fleet.run_on_cluster(sweep_id, pending, len(configs), store, spec, stop)
        elif passes > 1:
            status = yield from interleave.run_ruled_then_interleaved(sweep_id, pending, len(configs), store, spec,
                                                                      stop, memory_allowance_mb, environment)
        else:
            status = yield from _run_one_by_one(sweep_id, pending, len(configs), store, stop, environment)
        if status == "finished":
            if spec.fidelity:
                yield from _run_fidelity(spec, sweep_id, store, stop)
            if spec.quality and not stop():
                from chattts_lab.quality.sweep import run_quality

                yield from run_quality(spec, sweep_id, store, stop, Path(db_path).parent / "quality")
            status = "cancelled" if stop() else "finished"
    finally:
        store.set_status(sweep_id, status)
        store.close()
    yield _finished(db_path, sweep_id, status, spec)


def _open(store: Store, spec: SweepSpec | None, resume: int | None, db_path) -> tuple[SweepSpec, int, dict]:
    """The sweep to run: a new one in the store (its environment read now), or the one to resume, as stored."""
    if resume is not None:
        sweep = store.sweep(resume)
        refusal = resume_refusal(sweep, resume, db_path)
        if refusal:
            raise SpecError(refusal)
        store.set_status(resume, "running")
        return SweepSpec.from_dict(sweep["spec"]), resume, sweep["environment"]
    if spec is None:
        raise SpecError("run_sweep needs a spec or a sweep to resume")
    spec.validate()
    if spec.cluster:
        cluster.check_cluster(spec)  # an unreachable cluster or an unknown label: refused before the sweep exists
    # A cluster's cells run elsewhere: the head's own bandwidth would be no floor for them.
    environment = {**capture_environment(), **({} if spec.cluster else measure_read_bandwidth(spec.devices))}
    return spec, store.create_sweep(spec.to_dict(), environment), environment


def _finished(db_path, sweep_id: int, status: str, spec: SweepSpec) -> SweepFinished:
    """The sweep's last event, read back from the store, with its drift kept beside it."""
    with Store(db_path) as final:
        results = tuple(final.results(sweep_id))
        fid = tuple(final.fidelity(sweep_id))
        drift = sweep_drift(results, spec.drift_threshold_pct).as_dict()
        final.set_note(sweep_id, "drift", drift)  # kept with the sweep: the history lists it without the samples
    return SweepFinished(sweep_id, status, results, fid, drift)


def _run_one_by_one(sweep_id: int, pending: list, total: int, store: Store, stop: Callable[[], bool],
                    environment: dict) -> Iterator[SweepEvent]:
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
                bandwidth = interleave.read_bandwidth_again(sweep_id, store, environment, "cell")
            start_read_unused = False
        result = with_bandwidth(run_cell(cfg, should_stop=stop), bandwidth)
        store.add_cell(sweep_id, index, result)
        if cell_rule(cfg) is None:
            durations.append(result.elapsed_s)
        n_done += result.status != "cancelled"
        yield CellFinished(sweep_id, index, total, result, n_done, _eta(durations, runnable_left - 1))
        if result.status == "cancelled":
            return "cancelled"
    return "finished"


def _eta(durations: list[float], cells_left: int) -> float | None:
    if not durations or cells_left <= 0:
        return 0.0 if cells_left <= 0 else None
    return sum(durations) / len(durations) * cells_left


def _run_fidelity(spec: SweepSpec, sweep_id: int, store, stop) -> Iterator[SweepEvent]:
    """Drift of each (device, engine, precision) from fp32 stock, one fresh process each, once per sweep."""
    have = {(f["device"], f["engine"], f["precision"]) for f in store.fidelity(sweep_id)
            if f.get("status") != "cancelled"}
    threads = spec.fidelity_threads()
    measured = pairs_with_runnable_cells(spec.expand())
    for device, engine, precision in spec.fidelity_pairs():
        if (device, engine, precision) in have or stop():
            continue
        cfg = RunConfig(spec.model, device, precision, 1, threads, spec.fidelity_tokens, engine)
        base = {"device": device, "engine": engine, "precision": precision, "tokens": spec.fidelity_tokens}
        is_reference = (engine, precision) == engines.REFERENCE
        absent = absent_device_reason(cfg)
        ruled = ("skipped", absent) if absent else (None if is_reference else cell_rule(cfg))
        if ruled is None and not is_reference and (device, engine, precision) not in measured:
            ruled = ("skipped", "no cell of this device, engine and precision ran here (the rules stopped them all), "
                                "so there is no result to check against fp32 stock")
        if ruled:
            record = {**base, "status": ruled[0], "reason": ruled[1]}
        elif is_reference:
            record = {**base, "status": "ok", "reason": "the fp32 stock reference itself",
                      "hidden_rel_err": 0.0, "token_match": 1.0, "first_divergence": None}
        else:
            yield FidelityStarted(sweep_id, device, engine, precision)
            task = {"kind": "fidelity", "config": cfg.to_dict()}
            outcome = run_child(task, spec.timeout_s, threads, stop)
            record = {**base, **outcome.payload.get("fidelity", {}), "status": outcome.status,
                      "reason": outcome.reason}
        store.add_fidelity(sweep_id, record)
        yield FidelityFinished(sweep_id, record)


def resumable_sweep(db_path: str | Path) -> int | None:
    """The most recent sweep of this machine that did not finish (interrupted or cancelled), if any."""
    store = Store(db_path)
    try:
        for sweep in store.sweeps_list():
            if sweep["status"] in ("interrupted", "cancelled") and not resume_refusal(sweep, sweep["id"], db_path):
                return sweep["id"]
    finally:
        store.close()
    return None


def resume_refusal(sweep: dict | None, sweep_id: int, db_path) -> str | None:
    """Why a stored sweep cannot be resumed here (None: it can): the rules every resume path applies."""
    if sweep is None:
        return f"no sweep {sweep_id} in {db_path}"
    if sweep["spec"].get("kind", "sweep") != "sweep":  # a serving run is run again, not resumed
        return f"sweep {sweep_id} is a serving benchmark: run `python -m bench serve` again instead"
    if sweep["origin"] != "local":  # measuring here would mix this machine's numbers into another's sweep
        return f"sweep {sweep_id} was imported from another machine; it cannot be resumed here"
    return None
