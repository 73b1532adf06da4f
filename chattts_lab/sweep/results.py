"""What one benchmark cell is and what measuring it gave: the types the store, the reports and the runner share.

    RunConfig (one cell of a sweep) --a worker measures it--> raw samples --summarize()--> CellResult --row()--> dict

A CellResult flattens to one canonical record (`row()`, snake_case keys in CANONICAL_COLUMNS order):
the SQLite store keeps it as columns, the reports and plots read it. Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from chattts_lab import metrics
from chattts_lab.engines import DEFAULT_ENGINE, DEFAULT_PRECISION
from chattts_lab.trackers.env import fingerprint, summary
from chattts_lab.quality import QUALITY_COLUMNS
from chattts_lab.trackers.stats import Latency, median

# `timeout` (killed past the per-cell limit) is apart from `crashed` (the worker died by itself): one
# asks for a larger --timeout, the other for a bug report or more memory. `lost`: the cluster node running the
# cell left the cluster (chattts_lab.sweep.cluster); like `cancelled`, not the cell's own doing, so measured again on resume.
STATUSES = ("ok", "skipped", "unsupported", "oom", "error", "crashed", "timeout", "cancelled", "lost")
DONE_STATUSES = tuple(s for s in STATUSES if s not in ("cancelled", "lost"))  # the others are measured again on resume
BENCH_TEXT = "The quick brown fox jumps over the lazy dog, and then it takes a short rest."
VOICE_SEED = 2  # the speaker every benchmark call uses, so cells differ only in what the grid varies
AUDIO_SEED = 42
RESULT_MARKER = "CHATTTS_LAB_RESULT "  # the worker's one result line on stdout starts with this
PASS_MARKER = "CHATTTS_LAB_PASS "  # a serving worker's lines between commands (ready, one timed sample)


@dataclass(frozen=True)
class RunConfig:
    """One cell of a sweep: everything a fresh worker process needs to measure it."""

    model: str
    device: str
    precision: str
    batch_size: int
    threads: int
    tokens: int
    engine: str = DEFAULT_ENGINE
    compile: bool = False
    stream: bool = False
    warmup: int = 1
    repeats: int = 3
    min_time_s: float = 1.0
    max_repeats: int = 100
    timeout_s: float = 1800.0
    text: str = BENCH_TEXT
    # Address space the worker may add once its runtime is imported (RLIMIT_AS, see chattts_lab.limits); None: no cap.
    memory_budget_mb: float | None = None
    node: str | None = None  # a cluster node's label (a Ray resource) the cell must run on; None: any node, or here
    # the dispatch level the engine's own CPU kernels are forced to (engines.KERNEL_LEVELS); None: the CPU's best
    kernel_level: str | None = None

    @property
    def key(self) -> str:
        """The cell's identity inside a sweep (what --resume matches on)."""
        key = (f"{self.device}|{self.precision}|b{self.batch_size}|t{self.threads}|n{self.tokens}|"
               f"{self.engine}|compile={int(self.compile)}|stream={int(self.stream)}")
        key += f"|isa={self.kernel_level}" if self.kernel_level else ""  # keys without one stay as older sweeps stored them
        return key + (f"|node={self.node}" if self.node else "")

    @property
    def label(self) -> str:
        parts = [self.device, self.engine, self.precision, f"batch {self.batch_size}", f"{self.threads} thr",
                 f"{self.tokens} tok"]
        parts += ["compile"] if self.compile else []
        parts += ["stream"] if self.stream else []
        parts += [f"{self.kernel_level} kernels"] if self.kernel_level else []
        parts += [f"on {self.node}"] if self.node else []
        return " ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "RunConfig":
        names = {f.name for f in fields(RunConfig)}
        return RunConfig(**{k: v for k, v in data.items() if k in names})


_METRIC_FIELDS = ("rtf", "audio_s_per_s", "tokens_per_s", "step_ms", "ttfa_s", "peak_rss_mb", "peak_device_mb",
                  "load_s", "cold_s", "audio_s", "cpu_share", "passes", "mem_read_gbps")
# A timed call whose process got less CPU than this share of its threads was descheduled, not just memory-bound:
# a memory-bound decode still keeps its main thread busy (share >= 1 at 2 threads), other work on the cores does not.
CPU_SHARE_FLOOR = 0.5


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
    cpu_share: float | None = None  # CPU seconds over wall seconds of the timed calls (all threads; 2.0 = two cores)
    # interleaved passes the timed calls came from (1: one process ran them back to back; 0: none timed, or a row
    # stored before one-pass rows said 1)
    passes: int = 0
    mem_read_gbps: float | None = None  # read bandwidth of the cell's device, as its sweep measured it
    effective: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # load-time RSS, baseline RSS, interop threads ...
    samples: tuple[dict, ...] = ()  # raw per-run measurements, phases cold / warmup / timed
    # Wall time of the cell's own work, process start to end: an interleaved cell's worker waiting while the other
    # cells are timed is not counted (extra["worker_busy_s"] has each of its workers' share; rows written before
    # that key existed counted the worker's whole lifetime)
    elapsed_s: float = 0.0
    traceback: str = ""  # where an `error` or `crashed` cell failed: the worker's traceback or last stderr lines
    # Where a cluster sweep ran the cell: {"label", "hostname", "node_id", "environment"} (empty: the sweep's machine)
    node: dict = field(default_factory=dict)
    # Its configuration's audio quality beside the reference (chattts_lab.quality.sweep): QUALITY_COLUMNS by name
    quality: dict = field(default_factory=dict)

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
            "audio_s": self.audio_s, "cpu_share": self.cpu_share, "passes": self.passes, "model": c.model,
            "device_effective": eff.get("device"), "dtype_gpt": eff.get("dtype_gpt"), "kernels": eff.get("kernels"),
            "threads_effective": eff.get("threads"), "compile_effective": eff.get("compile"),
            "elapsed_s": self.elapsed_s, "memory_budget_mb": c.memory_budget_mb, "traceback": self.traceback,
            **self._roofline(), **self._node(), **{c: self.quality.get(c) for c in QUALITY_COLUMNS},
        }

    def _node(self) -> dict:
        """The cluster node the cell ran on: its label (else hostname), Ray id, and its environment's fingerprint."""
        n, node_env = self.node, self.node.get("environment")
        return {"node": n.get("label") or n.get("hostname"), "node_id": n.get("node_id"),
                "node_machine": summary(node_env) if node_env else None,
                "node_fingerprint": fingerprint(node_env) if node_env else None}

    def _roofline(self) -> dict:
        """The step's floor at this machine's bandwidth and how close the step came; empty for failed cells."""
        weight_bytes = self.effective.get("weight_bytes_per_step")
        weight_mb = weight_bytes / 1e6 if self.status == "ok" and weight_bytes else None
        floor = metrics.floor_step_ms(weight_mb, self.mem_read_gbps) if weight_mb else None
        return {"weight_mb_per_step": weight_mb, "mem_read_gbps": self.mem_read_gbps if weight_mb else None,
                "floor_step_ms": floor, "roofline": metrics.roofline(floor, self.step_ms) if floor else None}

    def to_dict(self) -> dict:
        return {
            "config": self.config.to_dict(), "status": self.status, "reason": self.reason,
            "latency": self.latency.as_dict() if self.latency else None,
            **{k: getattr(self, k) for k in (*_METRIC_FIELDS, "effective", "extra", "elapsed_s", "traceback", "node",
                                            "quality")},
            "samples": list(self.samples),
        }

    @staticmethod
    def from_dict(data: dict) -> "CellResult":
        lat = data.get("latency")
        return CellResult(
            config=RunConfig.from_dict(data["config"]), status=data["status"], reason=data.get("reason") or "",
            latency=Latency(**lat) if lat else None, **{k: data.get(k) for k in _METRIC_FIELDS if k != "passes"},
            passes=data.get("passes") or 0,
            effective=data.get("effective") or {}, extra=data.get("extra") or {},
            samples=tuple(data.get("samples") or ()), elapsed_s=data.get("elapsed_s") or 0.0,
            traceback=data.get("traceback") or "", node=data.get("node") or {}, quality=data.get("quality") or {},
        )


CANONICAL_COLUMNS = tuple(CellResult(RunConfig("m", "cpu", DEFAULT_PRECISION, 1, 1, 2), "ok").row())


def cpu_share(timed: list[dict]) -> float | None:
    """CPU time over wall time of the timed calls, all threads together (None for samples that did not record it)."""
    measured = [s for s in timed if s.get("cpu_s") is not None and s.get("wall_s")]
    wall = sum(s["wall_s"] for s in measured)
    return sum(s["cpu_s"] for s in measured) / wall if wall > 0 else None


def cpu_starved_note(cfg: RunConfig, share: float | None) -> str:
    """A sentence when the cell's process got less of the CPU than its thread count should get, else ''."""
    if share is None or cfg.device != "cpu" or share >= CPU_SHARE_FLOOR * cfg.threads:
        return ""
    return (f"CPU share {share:.2f} for {cfg.threads} thread(s), below {CPU_SHARE_FLOOR * cfg.threads:g}: other "
            "work took the cores during the timed calls; measure again on a quiet machine")


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
            passes=len({s["pass"] for s in timed if "pass" in s}) or 1,  # back to back: one pass of its own
        )
        kw["cpu_share"] = cpu_share(timed)
        starved = cpu_starved_note(cfg, kw["cpu_share"])
        reason = "; ".join(r for r in (reason, starved) if r)
    if status == "ok" and not timed:
        status, reason = "error", reason or "the worker returned no timed samples"
    return CellResult(
        config=cfg, status=status, reason=reason, latency=latency, audio_s=audio_s,
        load_s=payload.get("load_s"), cold_s=cold[0]["wall_s"] if cold else None,
        effective=payload.get("effective") or {}, extra=payload.get("extra") or {}, samples=samples,
        elapsed_s=elapsed_s, traceback=payload.get("traceback") or "", **kw,
    )
