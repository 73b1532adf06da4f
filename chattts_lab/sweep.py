"""Benchmark sweeps: a spec expands to cells, each cell runs in a fresh process, every result is kept.

    SweepSpec --expand()--> [RunConfig] --cell_rule() or a fresh worker process--> CellResult --> Store

`run_sweep` is a generator of progress events, so a command line can draw a progress bar and a UI can
show a live table and stop the sweep between (or during) cells without losing finished rows:

    for event in run_sweep(spec, "results/lab.sqlite", should_stop=lambda: stop_clicked):
        if isinstance(event, CellFinished): show(event.result.row())

Statistics are derived from the raw samples the worker returns (see `summarize`); derived metrics
come from `chattts_lab.metrics` only.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterator

from chattts_lab import metrics
from chattts_lab.requests import MAX_BATCH, MAX_NEW_TOKEN
from chattts_lab.stats import Latency, median

log = logging.getLogger(__name__)

# reliability: `timeout` (killed past --timeout) is its own status, apart from `crashed` (died by itself).
STATUSES = ("ok", "skipped", "unsupported", "oom", "error", "crashed", "timeout", "cancelled")
DONE_STATUSES = ("ok", "skipped", "unsupported", "oom", "error", "crashed", "timeout")  # `cancelled` cells re-run on resume
DEVICE_PATTERN = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and then it takes a short rest."
VOICE_SEED = 2
AUDIO_SEED = 42
RESULT_MARKER = "CHATTTS_LAB_RESULT "  # the worker's one result line on stdout starts with this


class SpecError(ValueError):
    """A sweep specification that cannot be run; the message says what to change."""


# ----------------------------------------------------------------------------------------------
# Specs and cells


@dataclass(frozen=True)
class RunConfig:
    """One cell of a sweep: everything a fresh worker process needs to measure it."""

    model: str
    device: str
    precision: str
    batch_size: int
    threads: int
    tokens: int
    engine: str = "stock"
    compile: bool = False
    stream: bool = False
    warmup: int = 1
    repeats: int = 3
    min_time_s: float = 1.0
    max_repeats: int = 100
    timeout_s: float = 1800.0
    text: str = BENCH_TEXT
    memory_budget_mb: float | None = None  # reliability: address space the worker may add (RLIMIT_AS), None = no limit

    @property
    def key(self) -> str:
        """The cell's identity inside a sweep (what --resume matches on)."""
        return (f"{self.device}|{self.precision}|b{self.batch_size}|t{self.threads}|n{self.tokens}|"
                f"{self.engine}|compile={int(self.compile)}|stream={int(self.stream)}")

    @property
    def label(self) -> str:
        parts = [self.device, self.engine, self.precision, f"batch {self.batch_size}", f"{self.threads} thr",
                 f"{self.tokens} tok"]
        parts += ["compile"] if self.compile else []
        parts += ["stream"] if self.stream else []
        return " ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "RunConfig":
        names = {f.name for f in fields(RunConfig)}
        return RunConfig(**{k: v for k, v in data.items() if k in names})


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
    text: str = BENCH_TEXT
    memory_budget_mb: float | None = None  # reliability: per-cell memory budget (see chattts_lab.limits)

    def errors(self) -> list[str]:
        """Everything wrong with the spec (empty when it can run). No side effects."""
        from chattts_lab.precision import ENGINES, PRECISIONS

        errs = []
        for name in ("devices", "precisions", "batches", "threads", "tokens", "engines", "compiles", "streams"):
            if not getattr(self, name):
                errs.append(f"{name} is empty")
        known_precisions = set(PRECISIONS) | _extra_precisions()
        errs += [f"unknown device {d!r}: use cpu, cuda, cuda:N or mps" for d in self.devices if not DEVICE_PATTERN.match(d)]
        errs += [f"unknown precision {p!r}: choose from {', '.join(sorted(known_precisions))}"
                 for p in self.precisions if p not in known_precisions]
        errs += [f"unknown engine {e!r}: choose from {', '.join(ENGINES)}" for e in self.engines if e not in ENGINES]
        errs += [f"batch size must be in 1..{MAX_BATCH}, got {b}" for b in self.batches if not _int_in(b, 1, MAX_BATCH)]
        errs += [f"threads must be in 1..4096, got {t}" for t in self.threads if not _int_in(t, 1, 4096)]
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
        errs += _budget_errors(self.memory_budget_mb)  # reliability
        return errs

    def validate(self) -> "SweepSpec":
        errs = self.errors()
        if errs:
            raise SpecError("; ".join(errs))
        return self

    def expand(self) -> list[RunConfig]:
        """Every combination, in a stable order (the order llama-bench uses: the last list varies fastest)."""
        self.validate()
        cells = []
        for engine, device, precision, compile_, stream, tokens, threads, batch in itertools.product(
            _dedup(self.engines), _dedup(self.devices), _dedup(self.precisions), _dedup(self.compiles),
            _dedup(self.streams), _dedup(self.tokens), _dedup(self.threads), _dedup(self.batches),
        ):
            cells.append(RunConfig(
                model=self.model, device=device, precision=precision, batch_size=int(batch), threads=int(threads),
                tokens=int(tokens), engine=engine, compile=bool(compile_), stream=bool(stream), warmup=self.warmup,
                repeats=self.repeats, min_time_s=float(self.min_time_s), max_repeats=self.max_repeats,
                timeout_s=float(self.timeout_s), text=self.text, memory_budget_mb=self.memory_budget_mb,
            ))
        return cells

    def fidelity_pairs(self) -> list[tuple[str, str, str]]:
        """(device, engine, precision) triples whose drift from fp32 stock is measured once per sweep."""
        return [(d, e, p) for d in _dedup(self.devices) for e in _dedup(self.engines) for p in _dedup(self.precisions)]

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "SweepSpec":
        names = {f.name: f for f in fields(SweepSpec)}
        kwargs = {}
        for k, v in data.items():
            if k in names:
                kwargs[k] = tuple(v) if isinstance(v, list) else v
        return SweepSpec(**kwargs)


def _budget_errors(budget) -> list[str]:
    from chattts_lab.limits import memory_budget_error

    message = memory_budget_error(budget)
    return [message] if message else []


def _int_in(value, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _dedup(values) -> list:
    return list(dict.fromkeys(values))


def _extra_precisions() -> set[str]:
    from chattts_lab.precision import extra_precisions

    return set(extra_precisions("lab"))


# ----------------------------------------------------------------------------------------------
# The one rule table: cells that cannot or need not run become rows with a status and a reason.


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _rule_device(cfg: RunConfig) -> str | None:
    from chattts_lab.devices import DeviceUnavailable, parse_device

    try:
        parse_device(cfg.device)
    except DeviceUnavailable as exc:
        return str(exc)
    return None


def _rule_precision(cfg: RunConfig) -> str | None:
    from chattts_lab.devices import parse_device
    from chattts_lab.precision import unsupported_reason

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
    ("skipped", _rule_device),
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


# ----------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class CellResult:
    config: RunConfig
    status: str
    reason: str = ""
    latency: Latency | None = None  # wall seconds of the timed runs
    rtf: float | None = None
    audio_s_per_s: float | None = None
    tokens_per_s: float | None = None
    step_ms: float | None = None
    ttfa_s: float | None = None
    peak_rss_mb: float | None = None
    peak_device_mb: float | None = None
    load_s: float | None = None
    cold_s: float | None = None
    audio_s: float | None = None
    effective: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # load-time RSS, baseline RSS, interop threads ...
    samples: tuple[dict, ...] = ()  # raw per-run measurements, phases cold / warmup / timed
    elapsed_s: float = 0.0  # wall time the cell took, process start to end

    def row(self) -> dict:
        """The canonical flat record (snake_case keys) used by the store, reports and plots."""
        c, lat, eff = self.config, self.latency, self.effective
        return {
            "device": c.device, "precision": c.precision, "batch_size": c.batch_size, "threads": c.threads,
            "tokens": c.tokens, "engine": c.engine, "compile": c.compile, "stream": c.stream,
            "status": self.status, "reason": self.reason,
            "latency_p50_s": lat.p50 if lat else None, "latency_p90_s": lat.p90 if lat else None,
            "latency_std_s": lat.std if lat else None, "latency_mean_s": lat.mean if lat else None,
            "repeats": lat.count if lat else 0,
            "rtf": self.rtf, "audio_s_per_s": self.audio_s_per_s, "tokens_per_s": self.tokens_per_s,
            "step_ms": self.step_ms, "ttfa_s": self.ttfa_s, "peak_rss_mb": self.peak_rss_mb,
            "peak_device_mb": self.peak_device_mb, "load_s": self.load_s, "cold_s": self.cold_s,
            "audio_s": self.audio_s, "model": c.model,
            "device_effective": eff.get("device"), "dtype_gpt": eff.get("dtype_gpt"),
            "threads_effective": eff.get("threads"), "compile_effective": eff.get("compile"),
            "elapsed_s": self.elapsed_s, "memory_budget_mb": c.memory_budget_mb,
        }

    def to_dict(self) -> dict:
        return {
            "config": self.config.to_dict(), "status": self.status, "reason": self.reason,
            "latency": self.latency.as_dict() if self.latency else None,
            **{k: getattr(self, k) for k in ("rtf", "audio_s_per_s", "tokens_per_s", "step_ms", "ttfa_s",
                                             "peak_rss_mb", "peak_device_mb", "load_s", "cold_s", "audio_s",
                                             "effective", "extra", "elapsed_s")},
            "samples": list(self.samples),
        }

    @staticmethod
    def from_dict(data: dict) -> "CellResult":
        lat = data.get("latency")
        return CellResult(
            config=RunConfig.from_dict(data["config"]), status=data["status"], reason=data.get("reason") or "",
            latency=Latency(**lat) if lat else None,
            **{k: data.get(k) for k in ("rtf", "audio_s_per_s", "tokens_per_s", "step_ms", "ttfa_s", "peak_rss_mb",
                                        "peak_device_mb", "load_s", "cold_s", "audio_s")},
            effective=data.get("effective") or {}, extra=data.get("extra") or {},
            samples=tuple(data.get("samples") or ()), elapsed_s=data.get("elapsed_s") or 0.0,
        )


CANONICAL_COLUMNS = tuple(CellResult(RunConfig("m", "cpu", "fp32", 1, 1, 2), "ok").row())


def summarize(cfg: RunConfig, status: str, reason: str, payload: dict, elapsed_s: float = 0.0) -> CellResult:
    """Derive a cell's statistics from the raw samples a worker returned."""
    samples = tuple(payload.get("samples") or ())
    timed = [s for s in samples if s.get("phase") == "timed"]
    cold = [s for s in samples if s.get("phase") == "cold"]
    walls = [s["wall_s"] for s in timed]
    latency = Latency.from_values(walls) if walls else None
    audio_s = median(s.get("audio_s") for s in timed) if timed else None
    kw: dict = {}
    if latency and audio_s:
        kw = dict(
            rtf=metrics.rtf(latency.p50, audio_s),
            audio_s_per_s=metrics.audio_s_per_s(audio_s * cfg.batch_size, latency.p50),
            tokens_per_s=metrics.tokens_per_s(cfg.batch_size * cfg.tokens, latency.p50),
        )
    if timed:
        kw.update(
            step_ms=median(metrics.step_ms(s.get("decode_s", 0.0), s.get("gpt_steps", 0) - 1) for s in timed),
            ttfa_s=median(s.get("ttfa_s") for s in timed),
            peak_rss_mb=max(s.get("peak_rss_mb") or 0.0 for s in timed),
            peak_device_mb=max((s["peak_device_mb"] for s in timed if s.get("peak_device_mb") is not None), default=None),
        )
    if status == "ok" and not timed:
        status, reason = "error", reason or "the worker returned no timed samples"
    return CellResult(
        config=cfg, status=status, reason=reason, latency=latency, audio_s=audio_s,
        load_s=payload.get("load_s"), cold_s=cold[0]["wall_s"] if cold else None,
        effective=payload.get("effective") or {}, extra=payload.get("extra") or {}, samples=samples,
        elapsed_s=elapsed_s, **kw,
    )


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
        return ChildOutcome("crashed", _death_reason(proc.returncode, stderr), {}, elapsed)
    return ChildOutcome(payload.get("status", "error"), payload.get("reason", ""), payload, elapsed)


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
    if cfg.memory_budget_mb and outcome.status == "crashed":  # reliability: a worker that dies under a budget
        from chattts_lab.limits import crash_under_budget

        outcome = crash_under_budget(outcome, cfg.memory_budget_mb)
    return summarize(cfg, outcome.status, outcome.reason, outcome.payload, outcome.elapsed_s)


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
    from chattts_lab.env import capture_environment
    from chattts_lab.store import Store

    store = Store(db_path)
    if resume is not None:
        sweep = store.sweep(resume)
        if sweep is None:
            raise SpecError(f"no sweep {resume} in {db_path}")
        if sweep["origin"] != "local":  # reliability: an imported sweep was measured on another machine
            raise SpecError(f"sweep {resume} was imported from another machine; it cannot be resumed here")
        spec = SweepSpec.from_dict(sweep["spec"])
        sweep_id, environment = resume, sweep["environment"]
        store.set_status(sweep_id, "running")
    else:
        if spec is None:
            raise SpecError("run_sweep needs a spec or a sweep to resume")
        spec.validate()
        environment = capture_environment()
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
            result = run_cell(cfg, should_stop=stop, python=python)
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
    threads = max(t for t in spec.threads if t <= usable_cores()) if any(
        t <= usable_cores() for t in spec.threads) else 1
    for device, engine, precision in spec.fidelity_pairs():
        if (device, engine, precision) in have or stop():
            continue
        cfg = RunConfig(spec.model, device, precision, 1, threads, spec.fidelity_tokens, engine)
        base = {"device": device, "engine": engine, "precision": precision, "tokens": spec.fidelity_tokens}
        is_reference = (engine, precision) == ("stock", "fp32")
        absent = _rule_device(cfg)
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
    """The most recent sweep that did not finish (interrupted or cancelled), if any."""
    from chattts_lab.store import Store

    store = Store(db_path)
    try:
        for sweep in store.sweeps_list():
            if sweep["status"] in ("interrupted", "cancelled") and sweep["origin"] == "local":  # reliability
                return sweep["id"]
    finally:
        store.close()
    return None

