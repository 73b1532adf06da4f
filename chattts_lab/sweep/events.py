"""What a running sweep tells its caller, in order: started, planned, each pass and cell, fidelity, finished."""

from __future__ import annotations

from dataclasses import dataclass

from chattts_lab.sweep.results import CellResult, RunConfig


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
class CallTimed(SweepEvent):
    """An interleaved pass timed one more cell (its cells finish only with the last pass: this is the progress)."""

    pass_no: int  # 0-based
    passes: int
    timed: int  # cells of this pass timed so far
    cells: int  # cells in this pass
    eta_s: float  # time left for the passes, from how long their calls took so far


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
    drift: dict | None = None  # chattts_lab.history.compare.Drift.as_dict(): drift_pct, noisy, the sentence to show
