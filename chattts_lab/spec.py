"""A sweep described as data: the lists whose cartesian product is the grid, and the one rule table
that turns cells which cannot (or need not) run here into rows with a status and a reason.

    SweepSpec --expand()--> [RunConfig] --cell_rule()--> (status, reason) or None (measure it)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, fields
from typing import Callable

from chattts_lab.devices import DeviceUnavailable, parse_device
from chattts_lab.env import usable_cores
from chattts_lab.limits import memory_budget_error
from chattts_lab.precision import ENGINES, PRECISIONS, extra_precisions, unsupported_reason
from chattts_lab.requests import MAX_BATCH, MAX_NEW_TOKEN
from chattts_lab.results import BENCH_TEXT, RunConfig

DEVICE_PATTERN = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
CLUSTER_PATTERN = re.compile(r"^ray(:\S+)?$")  # ray (a cluster started here, or this machine alone) or ray:ADDRESS
NODE_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")  # a Ray custom resource name
MAX_THREADS = 4096


class SpecError(ValueError):
    """A sweep specification that cannot be run; the message says what to change."""


@dataclass(frozen=True)
class SweepSpec:
    """The cartesian product of these lists, plus how each cell is measured."""

    model: str = "synthetic"
    devices: tuple[str, ...] = ("cpu",)
    precisions: tuple[str, ...] = ("fp32",)
    batches: tuple[int, ...] = (1,)
    threads: tuple[int, ...] = (1,)
    tokens: tuple[int, ...] = (128,)
    engines: tuple[str, ...] = ("stock",)
    compiles: tuple[bool, ...] = (False,)
    streams: tuple[bool, ...] = (False,)
    warmup: int = 1
    repeats: int = 3
    min_time_s: float = 1.0
    max_repeats: int = 100
    timeout_s: float = 1800.0
    fidelity: bool = True
    fidelity_tokens: int = 32
    # Audio quality beside the reference, stock fp32 on the same device, per (device, engine, precision): fixed texts
    # and voices spoken and scored once per sweep (chattts_lab.quality.sweep). Off by default: it costs minutes.
    quality: bool = False
    text: str = BENCH_TEXT
    memory_budget_mb: float | None = None  # per cell, see RunConfig.memory_budget_mb
    # Interleaved passes (chattts_lab.sweep): each pass makes one timed call of every cell, in a fresh random order,
    # so a machine that drifts during the sweep slows every cell alike instead of the cells measured last. With
    # passes > 1 the timed calls of a cell are its passes (repeats and min_time_s apply to passes == 1 only).
    passes: int = 3
    drift_threshold_pct: float = 5.0  # the sweep is `noisy` when the passes drift more (chattts_lab.compare.drift)
    # A fleet sweep (chattts_lab.cluster): its cells run as Ray tasks on the cluster's nodes. `nodes` is one more
    # grid axis: each label is a Ray custom resource one machine carries, and every cell is measured on each.
    cluster: str | None = None
    nodes: tuple[str, ...] = ()

    def errors(self) -> list[str]:
        """Everything wrong with the spec (empty when it can run). No side effects."""
        errs = [f"{name} is empty" for name in ("devices", "precisions", "batches", "threads", "tokens", "engines",
                                                "compiles", "streams") if not getattr(self, name)]
        known_precisions = set(PRECISIONS) | set(extra_precisions("lab"))
        errs += [f"unknown device {d!r}: use cpu, cuda, cuda:N or mps" for d in self.devices if not DEVICE_PATTERN.match(d)]
        errs += [f"unknown precision {p!r}: choose from {', '.join(sorted(known_precisions))}"
                 for p in self.precisions if p not in known_precisions]
        errs += [f"unknown engine {e!r}: choose from {', '.join(ENGINES)}" for e in self.engines if e not in ENGINES]
        errs += [f"batch size must be in 1..{MAX_BATCH}, got {b}" for b in self.batches if not _int_in(b, 1, MAX_BATCH)]
        errs += [f"threads must be in 1..{MAX_THREADS}, got {t}" for t in self.threads if not _int_in(t, 1, MAX_THREADS)]
        errs += [f"tokens must be in 2..{MAX_NEW_TOKEN}, got {n}" for n in self.tokens if not _int_in(n, 2, MAX_NEW_TOKEN)]
        if not _int_in(self.repeats, 1, 10_000):
            errs.append(f"repeats must be at least 1, got {self.repeats}")
        if not _int_in(self.warmup, 0, 1000):
            errs.append(f"warmup must be 0 or more, got {self.warmup}")
        if not _int_in(self.max_repeats, 1, 100_000) or self.max_repeats < self.repeats:
            errs.append(f"max_repeats must be at least repeats ({self.repeats}), got {self.max_repeats}")
        if not (isinstance(self.min_time_s, (int, float)) and self.min_time_s >= 0):
            errs.append(f"min_time_s must be 0 or more, got {self.min_time_s}")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            errs.append(f"timeout_s must be positive, got {self.timeout_s}")
        if not _int_in(self.fidelity_tokens, 2, MAX_NEW_TOKEN):
            errs.append(f"fidelity_tokens must be in 2..{MAX_NEW_TOKEN}, got {self.fidelity_tokens}")
        if not self.text.strip():
            errs.append("the benchmark text is empty")
        if not _int_in(self.passes, 1, 10_000):
            errs.append(f"passes must be at least 1, got {self.passes}")
        if not (isinstance(self.drift_threshold_pct, (int, float)) and self.drift_threshold_pct > 0):
            errs.append(f"drift_threshold_pct must be positive, got {self.drift_threshold_pct}")
        if self.cluster is not None and not CLUSTER_PATTERN.match(str(self.cluster)):
            errs.append(f"cluster must be ray or ray:ADDRESS (e.g. ray:10.0.0.5:6379), got {self.cluster!r}")
        if self.nodes and self.cluster is None:
            errs.append("node labels need a cluster (--cluster ray[:ADDRESS])")
        errs += [f"node label {n!r} is not a resource name (letters, digits, _ . -)" for n in self.nodes
                 if not NODE_LABEL_PATTERN.match(str(n))]
        budget = memory_budget_error(self.memory_budget_mb)
        return errs + ([budget] if budget else [])

    def validate(self) -> "SweepSpec":
        errs = self.errors()
        if errs:
            raise SpecError("; ".join(errs))
        return self

    def expand(self) -> list[RunConfig]:
        """Every combination, in a stable order (the order llama-bench uses: the last list varies fastest)."""
        self.validate()
        cells = []
        for node, engine, device, precision, compile_, stream, tokens, threads, batch in itertools.product(
            _dedup(self.nodes) or [None], _dedup(self.engines), _dedup(self.devices), _dedup(self.precisions),
            _dedup(self.compiles), _dedup(self.streams), _dedup(self.tokens), _dedup(self.threads),
            _dedup(self.batches),
        ):
            cells.append(RunConfig(
                model=self.model, device=device, precision=precision, batch_size=int(batch), threads=int(threads),
                tokens=int(tokens), engine=engine, compile=bool(compile_), stream=bool(stream), warmup=self.warmup,
                repeats=self.repeats, min_time_s=float(self.min_time_s), max_repeats=self.max_repeats,
                timeout_s=float(self.timeout_s), text=self.text, memory_budget_mb=self.memory_budget_mb, node=node,
            ))
        return cells

    def interleaved_passes(self, runnable_cells: int) -> int:
        """Passes to interleave: 1 (each cell in its own process, back to back) when there is nothing to interleave,
        or on a cluster, where cells on different machines cannot share a pass."""
        return self.passes if runnable_cells > 1 and self.cluster is None else 1

    def fidelity_pairs(self) -> list[tuple[str, str, str]]:
        """(device, engine, precision) triples whose drift from fp32 stock is measured once per sweep."""
        return [(d, e, p) for d in _dedup(self.devices) for e in _dedup(self.engines) for p in _dedup(self.precisions)]

    def fidelity_threads(self) -> int:
        """The most threads of the grid that this machine can give (1 if none fits)."""
        return max((t for t in self.threads if t <= usable_cores()), default=1)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "SweepSpec":
        names = {f.name for f in fields(SweepSpec)}
        data = {"passes": 1, **data}  # a spec stored before passes existed ran each cell back to back
        return SweepSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})


def _int_in(value, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _dedup(values) -> list:
    return list(dict.fromkeys(values))


# ----------------------------------------------------------------------------------------------
# The one rule table: cells that cannot or need not run become rows with a status and a reason.


def absent_device_reason(cfg: RunConfig) -> str | None:
    try:
        parse_device(cfg.device)
    except DeviceUnavailable as exc:
        return str(exc)
    return None


def _rule_precision(cfg: RunConfig) -> str | None:
    reason = unsupported_reason(cfg.engine, parse_device(cfg.device), cfg.precision)
    return f"{cfg.engine} engine, {cfg.precision} on {cfg.device}: {reason}" if reason else None


def _rule_compile(cfg: RunConfig) -> str | None:
    if cfg.compile and cfg.engine == "stock" and not cfg.device.startswith("cuda"):
        return ("stock ChatTTS silently ignores compile=True off CUDA, so this cell would repeat the "
                "compile=off one")
    return None


def _rule_threads(cfg: RunConfig) -> str | None:
    cores = usable_cores()
    if cfg.threads > cores:
        return f"{cfg.threads} threads exceed the {cores} usable cores (that measures oversubscription)"
    return None


# (status, rule) in order; the first rule that gives a reason decides the row.
RULES: tuple[tuple[str, Callable[[RunConfig], str | None]], ...] = (
    ("skipped", absent_device_reason),
    ("unsupported", _rule_precision),
    ("skipped", _rule_compile),
    ("skipped", _rule_threads),
)


def cell_rule(cfg: RunConfig) -> tuple[str, str] | None:
    """(status, reason) when the cell must not run here, else None."""
    for status, rule in RULES:
        reason = rule(cfg)
        if reason:
            return status, reason
    return None
