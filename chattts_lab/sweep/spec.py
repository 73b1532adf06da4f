"""A sweep described as data: the lists whose cartesian product is the grid, and the one rule table
that turns cells which cannot (or need not) run here into rows with a status and a reason.

    SweepSpec --expand()--> [RunConfig] --cell_rule()--> (status, reason) or None (measure it)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Annotated, Any, Callable, Mapping

import torch
from pydantic import AfterValidator
from pydantic import Field as Limit

from chattts_lab import engines

from chattts_lab.sweep import axes
from chattts_lab.sweep.axes import SpecError
from chattts_lab.devices import DeviceUnavailable, parse_device
from chattts_lab.trackers.env import usable_cores
from chattts_lab.limits import memory_budget_error
from chattts_lab.options import build_spec, field_problems, option
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.engines import ENGINES, KERNEL_LEVELS, PRECISIONS, has_own_kernels, unsupported_reason
from chattts_lab.requests import MAX_BATCH, MAX_NEW_TOKEN
from chattts_lab.sweep.results import BENCH_TEXT, RunConfig

DEVICE_PATTERN = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
CLUSTER_PATTERN = re.compile(r"^ray(:\S+)?$")  # ray (a cluster started here, or this machine alone) or ray:ADDRESS
NODE_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")  # a Ray custom resource name
MAX_THREADS = 4096


def _known(what: str, choices: Callable[[], Any], hint: Callable[[], str]):
    """An AfterValidator for a name from a list known at run time (precisions, engines)."""
    def check(value: str) -> str:
        if value not in choices():
            raise ValueError(f"unknown {what} {value!r}: {hint()}")
        return value

    return AfterValidator(check)


def _nonblank(text: str) -> str:
    if not text.strip():
        raise ValueError("the benchmark text is empty")
    return text


def _budget(value: float | None) -> float | None:
    error = memory_budget_error(value)
    if error:
        raise ValueError(error)
    return value


Device = Annotated[str, Limit(pattern=DEVICE_PATTERN.pattern)]
Precision = Annotated[str, _known("precision", lambda: PRECISIONS, lambda: f"choose from {', '.join(PRECISIONS)}")]
Engine = Annotated[str, _known("engine", lambda: ENGINES, lambda: f"choose from {', '.join(ENGINES)}")]
KernelLevel = Annotated[str, _known("kernel level", lambda: KERNEL_LEVELS, lambda: f"choose from {', '.join(KERNEL_LEVELS)}")]
NodeLabel = Annotated[str, Limit(pattern=NODE_LABEL_PATTERN.pattern)]
Nonempty = Limit(min_length=1)


def _ints(lo: int, hi: int):
    return Annotated[tuple[Annotated[int, Limit(ge=lo, le=hi)], ...], Nonempty]


def _on(text: str) -> bool:
    """on/off (also a list: on when every value is on, as --fidelity always took it)."""
    return all(axes.bool_list(text))


@dataclass(frozen=True)
class SweepSpec:
    """The cartesian product of these lists, plus how each cell is measured (a cell's own measurement defaults are
    RunConfig's, so that a cell built alone, as the fidelity check and bench.independent build one, agrees)."""

    model: str = option("auto", "auto, hf, synthetic, synthetic-tiny or a folder", "--model", group="grid")
    devices: Annotated[tuple[Device, ...], Nonempty] = option(
        ("cpu",), "cpu, cuda, cuda:N, mps", "--device", axes.str_list,
        "unknown device {input!r}: use cpu, cuda, cuda:N or mps", group="grid")
    precisions: Annotated[tuple[Precision, ...], Nonempty] = option(
        (engines.DEFAULT_PRECISION,), f"comma list of {', '.join(PRECISIONS)} (each engine runs some; the "
        "rule table turns the rest into rows with a reason)", "--precision", axes.str_list, group="grid")
    batches: _ints(1, MAX_BATCH) = option((1,), "texts per call", "--batch", axes.int_list, group="grid",
                                          what="batch size")
    threads: _ints(1, MAX_THREADS) = option(
        help="torch CPU threads (default: every usable core)", flag="--threads", parse=axes.int_list,
        group="grid", factory=lambda: (usable_cores(),))
    tokens: _ints(2, MAX_NEW_TOKEN) = option(
        (128,), f"audio tokens per text (exactly; {STEPS_PER_AUDIO_SECOND:g} per second)", "--tokens",
        axes.int_list, group="grid")
    engines: Annotated[tuple[Engine, ...], Nonempty] = option(
        (engines.DEFAULT_ENGINE,), f"comma list of {', '.join(ENGINES)} ({engines.DEFAULT_ENGINE}: ChatTTS's own "
        "Chat.infer)", "--engine", axes.str_list,
        group="grid")
    compiles: Annotated[tuple[bool, ...], Nonempty] = option(
        (False,), "torch.compile off,on", "--compile", axes.bool_list, group="grid")
    streams: Annotated[tuple[bool, ...], Nonempty] = option(
        (False,), "stream and measure time to first audio (bare --stream means on; or off,on)", "--stream",
        axes.bool_list, group="grid", nargs="?", const=(True,))
    # Side by side on one machine: the same lab cells with its CPU kernels built for each level (an AVX-512 machine
    # runs the AVX2 code too). Engines without their own kernels, and other devices, get one cell as before.
    kernel_levels: tuple[KernelLevel, ...] = option(
        (), f"the lab engine's CPU kernel levels to measure side by side: {', '.join(KERNEL_LEVELS)} (empty: "
            "the best this CPU runs)", "--kernel-level", axes.str_list, group="grid", metavar="LEVELS")
    warmup: Annotated[int, Limit(ge=0, le=1000)] = option(
        RunConfig.warmup, "uncounted calls after the cold (first) call", "--warmup", int)
    repeats: Annotated[int, Limit(ge=1, le=10_000)] = option(
        RunConfig.repeats, "timed calls per cell, at least (with --passes 1)", "--repeats", int)
    min_time_s: Annotated[float, Limit(ge=0)] = option(
        RunConfig.min_time_s, "timed seconds per cell, at least (with --passes 1)", "--min-time", float)
    max_repeats: Annotated[int, Limit(ge=1, le=100_000)] = option(
        RunConfig.max_repeats, "timed calls per cell, at most", "--max-repeats", int)
    timeout_s: Annotated[float, Limit(gt=0)] = option(
        RunConfig.timeout_s, "seconds per cell before it is killed", "--timeout", float)
    fidelity: bool = option(True, "measure drift from stock fp32 once per device, engine and precision", "--fidelity", _on)
    fidelity_tokens: Annotated[int, Limit(ge=2, le=MAX_NEW_TOKEN)] = option(
        32, "audio tokens of the fidelity check's decode", "--fidelity-tokens", int)
    # Audio quality beside the reference, stock fp32 on the same device, per (device, engine, precision): fixed texts
    # and voices spoken and scored once per sweep (chattts_lab.quality.sweep). Off by default: it costs minutes.
    quality: bool = option(False, "score each engine and precision's audio beside stock fp32 on the same texts, voices "
                                  "and seeds (predicted MOS, WER, speaker similarity; 6 clips per configuration, "
                                  "minutes on a CPU; bare --quality means on)", "--quality", _on, nargs="?", const=True)
    text: Annotated[str, AfterValidator(_nonblank)] = option(BENCH_TEXT)
    # per cell, see RunConfig.memory_budget_mb
    memory_budget_mb: Annotated[float | None, AfterValidator(_budget)] = option(
        None, "memory each cell's worker may add beyond its runtime (address space); over it the cell is oom",
        "--memory-budget-mb", float)
    # Interleaved passes (chattts_lab.sweep.runner): each pass makes one timed call of every cell, in a fresh random order,
    # so a machine that drifts during the sweep slows every cell alike instead of the cells measured last. With
    # passes > 1 the timed calls of a cell are its passes (repeats and min_time_s apply to passes == 1 only).
    passes: Annotated[int, Limit(ge=1, le=10_000)] = option(
        3, "interleaved passes: every cell's worker stays loaded and each pass times each cell once, in a fresh "
           "random order (1: each cell in its own process, back to back, with --repeats)", "--passes", int)
    # the sweep is `noisy` when the passes drift more (chattts_lab.history.compare.drift)
    drift_threshold_pct: Annotated[float, Limit(gt=0)] = option(
        5.0, "percent of drift across passes above which the sweep is marked noisy", "--drift-threshold", float)
    # A fleet sweep (chattts_lab.sweep.cluster): its cells run as Ray tasks on the cluster's nodes. `nodes` is one more
    # grid axis: each label is a Ray custom resource one machine carries, and every cell is measured on each.
    cluster: Annotated[str, Limit(pattern=CLUSTER_PATTERN.pattern)] | None = option(
        None, "run the cells as Ray tasks on a cluster's nodes: ray (a cluster started on this machine, or this "
              "machine alone) or ray:HOST:PORT of its head", "--cluster",
        rule="cluster must be ray or ray:ADDRESS (e.g. ray:10.0.0.5:6379), got {input!r}", group="fleet",
        metavar="ray[:ADDRESS]")
    nodes: tuple[NodeLabel, ...] = option(
        (), "measure every cell on each machine carrying one of these Ray resource labels "
            "(ray start --resources '{\"LABEL\": 1}')", "--nodes", axes.str_list,
        "node label {input!r} is not a resource name (letters, digits, _ . -)", group="fleet", metavar="LABELS")

    def errors(self) -> list[str]:
        """Everything wrong with the spec (empty when it can run). No side effects."""
        errs = field_problems(self)
        if isinstance(self.max_repeats, int) and isinstance(self.repeats, int) and self.max_repeats < self.repeats:
            errs.append(f"max_repeats must be at least repeats ({self.repeats}), got {self.max_repeats}")
        if self.nodes and self.cluster is None:
            errs.append("node labels need a cluster (--cluster ray[:ADDRESS])")
        return errs

    def validate(self) -> "SweepSpec":
        errs = self.errors()
        if errs:
            raise SpecError("; ".join(errs))
        return self

    @staticmethod
    def from_choices(choices: Mapping[str, Any]) -> "SweepSpec":
        """The one builder of a sweep from the command line's or a form's choices (see build_spec); max repeats
        is raised to repeats where it is below, as both always did."""
        spec = build_spec(SweepSpec, choices)
        return replace(spec, max_repeats=max(spec.max_repeats, spec.repeats)).validate()

    def expand(self) -> list[RunConfig]:
        """Every combination, in a stable order (the order llama-bench uses: the last list varies fastest)."""
        self.validate()
        cells = []
        for node, engine, device, precision, compile_, stream, level, tokens, threads, batch in itertools.product(
            _dedup(self.nodes) or [None], _dedup(self.engines), _dedup(self.devices), _dedup(self.precisions),
            _dedup(self.compiles), _dedup(self.streams), _dedup(self.kernel_levels) or [None], _dedup(self.tokens),
            _dedup(self.threads), _dedup(self.batches),
        ):
            if level is not None and not has_own_kernels(engine, device):
                if level != self.kernel_levels[0]:
                    continue  # one cell, at no forced level, for an engine without kernels of its own
                level = None
            cells.append(RunConfig(
                model=self.model, device=device, precision=precision, batch_size=int(batch), threads=int(threads),
                tokens=int(tokens), engine=engine, compile=bool(compile_), stream=bool(stream), warmup=self.warmup,
                repeats=self.repeats, min_time_s=float(self.min_time_s), max_repeats=self.max_repeats,
                timeout_s=float(self.timeout_s), text=self.text, memory_budget_mb=self.memory_budget_mb, node=node,
                kernel_level=level,
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
    if cfg.compile and cfg.engine in ENGINES:
        return engines.get(cfg.engine).compile_ignored_reason(torch.device(cfg.device))
    return None


def _rule_threads(cfg: RunConfig) -> str | None:
    cores = usable_cores()
    if cfg.threads > cores:
        return f"{cfg.threads} threads exceed the {cores} usable cores (that measures oversubscription)"
    return None


def _rule_kernel_level(cfg: RunConfig) -> str | None:
    if cfg.kernel_level and cfg.node is None:  # a fleet cell's level is its own machine's question
        return engines.kernel_level_reason(cfg.kernel_level)
    return None


# (status, rule) in order; the first rule that gives a reason decides the row.
RULES: tuple[tuple[str, Callable[[RunConfig], str | None]], ...] = (
    ("skipped", absent_device_reason),
    ("unsupported", _rule_precision),
    ("unsupported", _rule_kernel_level),
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


def pairs_with_runnable_cells(cells) -> set[tuple[str, str, str]]:
    """(device, engine, precision) of the cells that will run here: a pair whose every cell the rules stop has
    nothing to compare with fp32 stock, so its fidelity process is not started."""
    return {(c.device, c.engine, c.precision) for c in cells if cell_rule(c) is None}
