"""How a grid is written, how large it may be, and how long it will take here.

    int_list("1,4,8") == (1, 4, 8);  int_list("1-8+2") == (1, 3, 5, 7);  int_list("1-16*2") == (1, 2, 4, 8, 16)
    estimate = refuse_huge_grid(spec, db_path)   # SpecError when over MAX_CELLS or MAX_HOURS

Estimates come from this machine's own history when the store holds finished `ok` cells: the nearest
measured configuration calibrates the reference step times below (so an int8 grid is estimated from a
measured fp32 cell too), and its process overhead (start, imports, model load) is taken as measured.
Without history, the reference figures are those measured in the README (stock and lab engines, full-size
weights, 2 cores of an AVX2 EPYC): a CPU, so a GPU grid is overestimated until it has run once.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from chattts_lab import metrics
from chattts_lab.results import RunConfig
from chattts_lab.spec import SpecError, SweepSpec, cell_rule
from chattts_lab.store import Store

MAX_CELLS = 200  # a grid above this, or above MAX_HOURS, is refused unless confirmed (`python -m bench --yes`)
MAX_HOURS = 6.0
_RANGE = re.compile(r"^(\d+)-(\d+)(?:([+*])(\d+))?$")
_ON_OFF = {"on": True, "off": False, "1": True, "0": False, "true": True, "false": False, "yes": True, "no": False}

# ---------------------------------------------------------------------------------------------
# List syntax (llama-bench's): comma lists, and integer ranges lo-hi, lo-hi+step, lo-hi*factor


MAX_RANGE_VALUES = 4096  # larger than any axis can take (threads 1..4096); refused before it is built


def int_list(text: str) -> tuple[int, ...]:
    """'1,4,8', ranges '1-8' (step 1), '1-8+2' (step 2), '1-16*2' (doubling)."""
    out: list[int] = []
    for item in _items(text):
        m = _RANGE.match(item)
        if m:
            out += _expand_range(item, int(m[1]), int(m[2]), m[3], int(m[4] or 1))
            continue
        try:
            out.append(int(item))
        except ValueError:
            raise SpecError(f"{item!r} is not a whole number") from None
    return tuple(out)


def _expand_range(item: str, lo: int, hi: int, op: str | None, step: int) -> list[int]:
    if hi < lo or step < 1 or (op == "*" and (step < 2 or lo < 1)):
        raise SpecError(f"bad range {item!r}: use lo-hi, lo-hi+step or lo-hi*factor")
    count = (hi - lo) // step + 1 if op != "*" else 0  # a doubling range stays short
    if count > MAX_RANGE_VALUES:
        raise SpecError(f"{item!r} asks for {count:,} values; one range gives at most {MAX_RANGE_VALUES:,}")
    values, v = [], lo
    while v <= hi:
        values.append(v)
        v = v * step if op == "*" else v + step
    return values


def str_list(text: str) -> tuple[str, ...]:
    return tuple(i.lower() for i in _items(text))


def bool_list(text: str) -> tuple[bool, ...]:
    """'off,on' -> (False, True); also 1/0, true/false, yes/no."""
    out = []
    for item in _items(text):
        if item.lower() not in _ON_OFF:
            raise SpecError(f"{item!r} is not on or off")
        out.append(_ON_OFF[item.lower()])
    return tuple(out)


def _items(text: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise SpecError("empty list")
    return items


def describe(seconds: float) -> str:
    """A duration as a person reads it: '45 s', '12.5 min', '2.3 h'."""
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


# ---------------------------------------------------------------------------------------------
# Reference figures (README, "Measured" tables: batch 1, 2 threads, N=128, full-size weights)

REFERENCE_STEP_MS = {
    ("stock", "fp32"): 122.0, ("stock", "bf16"): 66.0, ("stock", "fp16"): 66.0, ("stock", "int8"): 56.0,
    ("lab", "fp32"): 98.0, ("lab", "bf16"): 54.0, ("lab", "fp16"): 54.0, ("lab", "int8"): 25.3, ("lab", "int4"): 32.0,
}
# Step time grows with the batch: int8 batch 8 is ~1.95x batch 1, fp32 ~2.4-2.8x, bf16 ~4.4x (README tables).
BATCH_SLOPE = {"fp32": 0.3, "bf16": 0.5, "fp16": 0.5, "int8": 0.14, "int4": 0.14}
THREADS_EXPONENT = 0.3  # 1 thread vs 2: fp32 about even, int8 1.15x, bf16 1.56x slower; 2**0.3 = 1.23 between
TINY_FACTOR = 0.1  # synthetic-tiny keeps 2 of the GPT's 20 layers
DECODE_S_PER_AUDIO_S = 0.15  # decoder + vocoder + prompt per item: p50 latency minus the steps, README tables
START_S = 8.0  # a fresh worker: Python, torch and ChatTTS imported
LOAD_S = {"stock": 2.0, "lab": 6.0}  # README: stock 1.7 s; lab converts the GPT layer by layer
COLD_EXTRA_S = 1.5  # the first call also compiles the text normaliser (numba)


def reference_step_ms(cfg: RunConfig) -> float:
    base = REFERENCE_STEP_MS.get((cfg.engine, cfg.precision), REFERENCE_STEP_MS[("stock", "fp32")])
    step = base * (1 + BATCH_SLOPE.get(cfg.precision, 0.3) * (cfg.batch_size - 1))
    step *= (2 / cfg.threads) ** THREADS_EXPONENT
    return step * (TINY_FACTOR if _is_tiny(cfg.model) else 1.0)


def _reference_overhead_s(cfg: RunConfig) -> float:
    load = LOAD_S.get(cfg.engine, LOAD_S["stock"])
    return START_S + load * (TINY_FACTOR if _is_tiny(cfg.model) else 1.0)


def _is_tiny(model: str) -> bool:
    return "tiny" in model


# ---------------------------------------------------------------------------------------------
# This machine's history


@dataclass(frozen=True)
class MeasuredCell:
    """One `ok` cell measured on this machine: what the estimate is calibrated with."""

    config: RunConfig
    step_ms: float
    overhead_s: float  # the cell's wall time that was not its calls: process start, imports, model load


def machine_history(db_path: str | Path | None) -> list[MeasuredCell]:
    """This machine's finished `ok` cells in the store (none when there is no store yet: nothing is created)."""
    if db_path is None or not Path(db_path).exists():
        return []
    with Store(db_path) as store:
        rows = store.measured_here()
    return [MeasuredCell(RunConfig(r["model"], r["device"], r["precision"], r["batch_size"], r["threads"], r["tokens"],
                                   r["engine"]), r["step_ms"], max(0.0, r["elapsed_s"] - r["calls_s"]))
            for r in rows]


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
    return reference_step_ms(cfg) * speed, statistics.median(h.overhead_s for h in nearest)


# ---------------------------------------------------------------------------------------------
# Estimates and the size limit


def estimate_cell_s(cfg: RunConfig, history: list[MeasuredCell] = ()) -> float:
    """Seconds one cell takes: process start, model load, the cold call, warm-up and the timed calls."""
    if cell_rule(cfg):
        return 0.0  # a rule row: no process runs
    step_ms, overhead_s = step_ms_and_overhead(cfg, list(history))
    speed = step_ms / reference_step_ms(cfg)
    decode_s = DECODE_S_PER_AUDIO_S * metrics.audio_seconds(cfg.tokens) * cfg.batch_size * speed
    call_s = (cfg.tokens - 1) * step_ms / 1000 + decode_s
    timed = min(cfg.max_repeats, max(cfg.repeats, math.ceil(cfg.min_time_s / call_s)))
    return overhead_s + COLD_EXTRA_S + (1 + cfg.warmup + timed) * call_s


@dataclass(frozen=True)
class GridEstimate:
    cells: int
    ruled: int  # cells the rule table turns into rows without running them
    seconds: float
    from_history: bool  # calibrated with this machine's own measured cells

    @property
    def too_large(self) -> bool:
        return self.cells > MAX_CELLS or self.seconds > MAX_HOURS * 3600

    def summary(self) -> str:
        basis = "this machine's past sweeps" if self.from_history else "the README's reference machine"
        return (f"{self.cells} cell(s) ({self.ruled} skipped or unsupported by rule), roughly "
                f"{describe(self.seconds)} (estimated from {basis}; each cell runs in a fresh process)")


def estimate_grid(spec: SweepSpec, db_path: str | Path | None = None) -> GridEstimate:
    """How many cells the spec expands to and how long they (and the fidelity checks) take here."""
    history = machine_history(db_path)
    cells = spec.expand()
    passes = spec.interleaved_passes(sum(1 for c in cells if cell_rule(c) is None))
    if passes > 1:  # interleaved: one timed call per pass (reloads of workers that do not fit are not counted)
        timed_as_run = [replace(c, repeats=passes, max_repeats=passes, min_time_s=0.0) for c in cells]
    else:
        timed_as_run = cells
    seconds = sum(estimate_cell_s(c, history) for c in timed_as_run)
    if spec.fidelity:
        seconds += sum(_fidelity_s(spec, device, engine, precision, history)
                       for device, engine, precision in spec.fidelity_pairs())
    model_devices = {(c.model, c.device) for c in cells}
    from_history = any((h.config.model, h.config.device) in model_devices for h in history)
    return GridEstimate(len(cells), sum(1 for c in cells if cell_rule(c)), seconds, from_history)


def _fidelity_s(spec: SweepSpec, device: str, engine: str, precision: str, history: list[MeasuredCell]) -> float:
    """A fidelity process (one per pair but the fp32 stock reference) loads two models and makes one call each."""
    if (engine, precision) == ("stock", "fp32"):
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
