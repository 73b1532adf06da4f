"""How large a grid may be, and how long it will take here (how it is written: chattts_lab.sweep.axes).

    estimate = refuse_huge_grid(spec, db_path)   # SpecError when over MAX_CELLS or MAX_HOURS

Estimates come from this machine's own history when the store holds finished `ok` cells: the nearest
measured configuration calibrates the reference step times below (so an int8 grid is estimated from a
measured fp32 cell too), and its process overhead (start, imports, model load), its cold call's extra time and the
time its calls spend outside the GPT steps are taken as measured. A cell costs what its own worker did (an interleaved cell's waits
while the others are timed are theirs); cells the rule table stops, and those a resumed sweep has, cost nothing.
Without history, the reference figures are those measured in the README (stock and lab engines, full-size
weights, 2 cores of an AVX2 EPYC): a CPU, so a GPU grid is overestimated until it has run once.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from chattts_lab import engines, metrics
from chattts_lab.said import Said
from chattts_lab.sweep import launcher
from chattts_lab.sweep.results import DONE_STATUSES, RunConfig
from chattts_lab.sweep.axes import bool_list, int_list, str_list  # noqa: F401  the list syntax, where callers look for it
from chattts_lab.sweep.spec import SpecError, SweepSpec, cell_rule, pairs_with_runnable_cells
from chattts_lab.history.store import Store

MAX_CELLS = 200  # a grid above this, or above MAX_HOURS, is refused unless confirmed (`python -m bench --yes`)
MAX_HOURS = 6.0


def describe(seconds: float) -> str:
    """A duration as a person reads it: '45 s', '12.5 min', '2.3 h'."""
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


# ---------------------------------------------------------------------------------------------
# Reference figures: each engine's own (chattts_lab/engines: batch 1, 2 threads, N=128, full-size weights)

THREADS_EXPONENT = 0.3  # 1 thread vs 2: fp32 about even, int8 1.15x, bf16 1.56x slower; 2**0.3 = 1.23 between
TINY_FACTOR = 0.1  # synthetic-tiny keeps 2 of the GPT's 20 layers
DECODE_S_PER_AUDIO_S = 0.15  # decoder + vocoder + prompt per item: p50 latency minus the steps, README tables
START_S = 0.1  # a fresh worker, forked with torch and ChatTTS imported (docs/measurements/2026-12-04-worker-start.md)
SERVER_START_S = 8.0  # the forkserver importing torch and ChatTTS: counted until this process has started it
COLD_EXTRA_S = 0.5  # the first call's one-time costs; 1.5 s while every process compiled the text normaliser, which
# now loads from numba's cache (chattts_lab.models._keep_normaliser_compiled). Cold minus p50, the quick preset on
# Zen 4 (2026-12-06-one-time-costs.md): tiny weights 0.15-0.2 s; full size 0.25-0.4 s, stock fp32 1.05 s
# A read of the memory bandwidth (roofline.measure_read_bandwidth) and the sweep's own work around it, outside every
# cell's worker, before this machine has timed any of its own (`read_s_here`): (the sweep's wall time - its cells'
# own work) / its reads, the quick preset on 2 quiet cores (AVX-512 Xeon, 2026-12-02): 16.2 s / 4 on synthetic-tiny,
# 20.4 s / 4 on full-size synthetic weights. Machines differ by more than the 1.5x an estimate may miss by: on a quiet
# AVX2 EPYC (2026-12-03) the same two-cell sweep spent 1.6 s beyond its cells' own work for its 4 reads.
READ_BANDWIDTH_S = 4.5


def reference_step_ms(cfg: RunConfig) -> float:
    reference_engine, reference_precision = engines.REFERENCE
    base = (_engine(cfg).reference_step_ms.get(cfg.precision)
            or engines.get(reference_engine).reference_step_ms[reference_precision])
    step = base * (1 + engines.precision_of(cfg.precision).batch_slope * (cfg.batch_size - 1))
    step *= (2 / cfg.threads) ** THREADS_EXPONENT
    return step * (TINY_FACTOR if _is_tiny(cfg.model) else 1.0)


def _reference_overhead_s(cfg: RunConfig) -> float:
    load = _engine(cfg).load_s
    return START_S + load * (TINY_FACTOR if _is_tiny(cfg.model) else 1.0)


def _engine(cfg: RunConfig) -> engines.Engine:
    return engines.get(cfg.engine if cfg.engine in engines.ENGINES else engines.DEFAULT_ENGINE)


def _is_tiny(model: str) -> bool:
    return "tiny" in model


# ---------------------------------------------------------------------------------------------
# This machine's history


@dataclass(frozen=True)
class MeasuredCell:
    """One `ok` cell measured on this machine: what the estimate is calibrated with."""

    config: RunConfig
    step_ms: float
    # the cell's wall time that was not its calls (process start, imports, model load); None where the row does not
    # say (an interleaved row stored before its workers' own work was kept apart from their waits)
    overhead_s: float | None
    rest_s_per_audio_s: float | None = None  # a timed call's time outside the GPT steps, per second of audio made
    cold_extra_s: float | None = None  # what the first call took beyond a timed one (None where not kept)


def machine_history(db_path: str | Path | None) -> list[MeasuredCell]:
    """This machine's finished `ok` cells in the store (none when there is no store yet: nothing is created)."""
    if db_path is None or not Path(db_path).exists():
        return []
    with Store(db_path) as store:
        rows = store.measured_here()
    return [MeasuredCell(RunConfig(r["model"], r["device"], r["precision"], r["batch_size"], r["threads"], r["tokens"],
                                   r["engine"]), r["step_ms"],
                         max(0.0, r["elapsed_s"] - r["calls_s"]) if r["own_elapsed"] else None, _rest_rate(r),
                         _cold_extra(r))
            for r in rows]


def _cold_extra(row: dict) -> float | None:
    """Seconds the cold call took beyond a timed call's median (the text normaliser's JIT, first-call costs)."""
    if row.get("cold_s") is None or not row.get("latency_p50_s"):
        return None
    return max(0.0, row["cold_s"] - row["latency_p50_s"])


def _rest_rate(row: dict) -> float | None:
    """Seconds per audio second that a call spends outside its GPT steps (prompt, decoder, vocoder)."""
    if not row.get("latency_p50_s"):
        return None
    rest_s = row["latency_p50_s"] - (row["tokens"] - 1) * row["step_ms"] / 1000
    return max(0.0, rest_s) / (metrics.audio_seconds(row["tokens"]) * row["batch_size"])


def _nearest(cfg: RunConfig, history: list[MeasuredCell]) -> list[MeasuredCell]:
    """The measured cells closest to cfg (same model and device required; engine and precision weigh most)."""
    same = [h for h in history if (h.config.model, h.config.device) == (cfg.model, cfg.device)]
    if not same:
        return []

    def distance(h: MeasuredCell) -> float:
        c = h.config
        return (4 * (c.engine != cfg.engine) + 4 * (c.precision != cfg.precision)
                + abs(math.log2(c.batch_size / cfg.batch_size)) + abs(math.log2(c.threads / cfg.threads)))

    best = min(distance(h) for h in same)
    return [h for h in same if distance(h) == best]


def step_ms_and_overhead(cfg: RunConfig, history: list[MeasuredCell]) -> tuple[float, float]:
    """(ms per GPT step, seconds of process overhead) expected for cfg on this machine."""
    nearest = _nearest(cfg, history)
    if not nearest:
        return reference_step_ms(cfg), _reference_overhead_s(cfg)
    # how much faster or slower this machine ran than the reference figures, on the nearest configuration
    speed = statistics.median(h.step_ms / reference_step_ms(h.config) for h in nearest)
    return reference_step_ms(cfg) * speed, _measured_overhead_s(cfg, nearest, history)


def _measured_overhead_s(cfg: RunConfig, nearest: list[MeasuredCell], history: list[MeasuredCell]) -> float:
    """The nearest cells' process overhead; else that of any cell of the same model, device and engine (starting
    and loading hardly depend on the batch or the threads); else the reference figure."""
    return _measured(cfg, nearest, history, "overhead_s", _reference_overhead_s(cfg))


def _cold_extra_s(cfg: RunConfig, history: list[MeasuredCell]) -> float:
    """What the cold call costs beyond a warm one here, found as the process overhead is; else COLD_EXTRA_S."""
    return _measured(cfg, _nearest(cfg, history), history, "cold_extra_s", COLD_EXTRA_S)


def _measured(cfg: RunConfig, nearest: list[MeasuredCell], history: list[MeasuredCell], name: str,
              reference: float) -> float:
    same_engine = [h for h in history if (h.config.model, h.config.device, h.config.engine)
                   == (cfg.model, cfg.device, cfg.engine)]
    for pool in (nearest, same_engine):
        known = [getattr(h, name) for h in pool if getattr(h, name) is not None]
        if known:
            return statistics.median(known)
    return reference


def call_s(cfg: RunConfig, history: list[MeasuredCell] = ()) -> float:
    """Seconds one call of cfg takes here: its GPT steps, then the prompt, decoder and vocoder of each item."""
    step_ms, _ = step_ms_and_overhead(cfg, list(history))
    rates = [h.rest_s_per_audio_s for h in _nearest(cfg, list(history)) if h.rest_s_per_audio_s is not None]
    rate = statistics.median(rates) if rates else DECODE_S_PER_AUDIO_S * step_ms / reference_step_ms(cfg)
    return (cfg.tokens - 1) * step_ms / 1000 + rate * metrics.audio_seconds(cfg.tokens) * cfg.batch_size


# ---------------------------------------------------------------------------------------------
# Estimates and the size limit


def estimate_cell_s(cfg: RunConfig, history: list[MeasuredCell] = (), passes: int = 1) -> float:
    """Seconds one cell takes: process start, model load, the cold call, warm-up and the timed calls.

    With `passes` > 1 (interleaved) its worker makes one timed call per pass and one more untimed call once every
    worker is loaded; the time it waits while the other cells are timed is theirs, not its own.
    """
    if cell_rule(cfg):
        return 0.0  # a rule row: no process runs
    _, overhead_s = step_ms_and_overhead(cfg, list(history))
    one = call_s(cfg, history)
    if passes > 1:
        calls = 1 + cfg.warmup + 1 + passes
    else:
        calls = 1 + cfg.warmup + min(cfg.max_repeats, max(cfg.repeats, math.ceil(cfg.min_time_s / one)))
    return overhead_s + _cold_extra_s(cfg, list(history)) + calls * one


@dataclass(frozen=True)
class GridEstimate:
    cells: int
    ruled: int  # cells the rule table turns into rows without running them
    seconds: float
    from_history: bool  # calibrated with this machine's own measured cells
    done: int = 0  # cells a resumed sweep measured already (they cost nothing more)

    @property
    def too_large(self) -> bool:
        return self.cells > MAX_CELLS or self.seconds > MAX_HOURS * 3600

    def summary(self) -> str:
        basis = Said("this machine's past sweeps") if self.from_history else Said("the README's reference machine")
        done = Said(", {done} measured already", done=self.done) if self.done else ""
        return Said("{cells} cell(s) ({ruled} skipped or unsupported by rule{done}), roughly {time} (estimated from "
                    "{basis}; each cell runs in a fresh process)", cells=self.cells, ruled=self.ruled, done=done,
                    time=describe(self.seconds), basis=basis)


def estimate_grid(spec: SweepSpec, db_path: str | Path | None = None, resume: int | None = None) -> GridEstimate:
    """How many cells the spec expands to and how long they (and the fidelity checks) take here; with `resume`,
    what is left of that stored sweep (its measured cells cost nothing)."""
    history = machine_history(db_path)
    cells = spec.expand()
    done = _done_keys(db_path, resume)
    runnable = [c for c in cells if cell_rule(c) is None and c.key not in done]
    passes = spec.interleaved_passes(len(runnable))
    seconds = sum(estimate_cell_s(c, history, passes) for c in runnable)
    seconds += read_s_here(db_path) * _bandwidth_reads(spec, len(runnable), passes, resume is not None)
    seconds += SERVER_START_S if runnable and not spec.cluster and not launcher.server_started() else 0.0
    if spec.fidelity:
        measured = pairs_with_runnable_cells(c for c in cells if c.key not in done)
        seconds += sum(_fidelity_s(spec, *pair, history) for pair in spec.fidelity_pairs() if pair in measured)
    model_devices = {(c.model, c.device) for c in cells}
    from_history = any((h.config.model, h.config.device) in model_devices for h in history)
    return GridEstimate(len(cells), sum(1 for c in cells if cell_rule(c)), seconds, from_history,
                        sum(1 for c in cells if c.key in done))


def read_s_here(db_path: str | Path | None) -> float:
    """Seconds a bandwidth read costs a sweep here: the mean over the reads this machine's sweeps timed (the first in
    a fresh process costs more than the next, and a sweep makes both), else READ_BANDWIDTH_S."""
    if db_path is None or not Path(db_path).exists():
        return READ_BANDWIDTH_S
    with Store(db_path) as store:
        seconds = store.read_seconds_here()
    return statistics.fmean(seconds) if seconds else READ_BANDWIDTH_S


def _done_keys(db_path: str | Path | None, resume: int | None) -> set[str]:
    if resume is None or db_path is None or not Path(db_path).exists():
        return set()
    with Store(db_path) as store:
        return {r.config.key for r in store.results(resume) if r.status in DONE_STATUSES}


def _bandwidth_reads(spec: SweepSpec, runnable: int, passes: int, resumed: bool) -> int:
    """How often the sweep reads the memory bandwidth (chattts_lab.sweep.runner): at a fresh sweep's start, then before
    each pass, or before each cell of a one-pass sweep but the one the start's read serves; never for a cluster."""
    if spec.cluster:
        return 0
    at_start = 0 if resumed else 1
    return at_start + (passes if passes > 1 else max(0, runnable - at_start))


def _fidelity_s(spec: SweepSpec, device: str, engine: str, precision: str, history: list[MeasuredCell]) -> float:
    """A fidelity process (one per pair but the fp32 stock reference) loads two models and makes one call each."""
    if (engine, precision) == engines.REFERENCE:
        return 0.0
    probe = RunConfig(spec.model, device, precision, 1, spec.fidelity_threads(), spec.fidelity_tokens, engine,
                      warmup=0, repeats=1, min_time_s=0.0)
    return 2 * estimate_cell_s(probe, history)


def refuse_huge_grid(spec: SweepSpec, db_path: str | Path | None = None) -> GridEstimate:
    """The grid's estimate, or SpecError when it is over MAX_CELLS cells or MAX_HOURS hours."""
    estimate = estimate_grid(spec, db_path)
    if estimate.too_large:
        raise SpecError(f"refusing a grid of {estimate.cells} cells / about {describe(estimate.seconds)} of work (it "
                        f"would take about that long here; limits: {MAX_CELLS} cells, {MAX_HOURS:g} h); narrow the "
                        "lists, or run it with `python -m bench --yes`")
    return estimate
