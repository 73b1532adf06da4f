"""Comparisons that survive a noisy machine: drift across interleaved passes, and every ratio with an interval.

    [CellResult with raw passes] --sweep_drift()--> Drift (drift_pct, noisy, what to do)
    two cells' raw timed calls --speed_ratio()--> Ratio (median ratio, bootstrap interval, a sentence)

Drift. An interleaved sweep measures every cell once per pass, so each pass is already a check of the
machine: for each cell, each pass's time relative to that cell's median over passes; for each pass, the
median of those relative times over the cells (one cell's outlier does not move it, a machine that slowed
down moves them all). `drift_pct` is the spread of those per-pass factors (max - min, in percent).
Re-measuring only the first cell at the end would test two moments of one cell; the passes test every
moment of every cell at no extra cost.

Ratios. "A is 2.1x faster than B" is median(B's times) / median(A's times), with a percentile bootstrap
interval from scipy.stats.bootstrap. Calls of the same pass ran close together, so when both cells have
the same passes they are resampled as pairs (a drift shared by the pair cancels in its ratio).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from chattts_lab.said import Said
from chattts_lab.sweep.results import CellResult
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.trackers.stats import median

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
DEFAULT_DRIFT_THRESHOLD_PCT = SweepSpec.drift_threshold_pct  # also for sweeps stored before the spec had it


def timed_by_pass(result: CellResult) -> dict[int, float]:
    """Wall seconds of the cell's timed call in each interleaved pass ({} when it ran without passes)."""
    return {s["pass"]: s["wall_s"] for s in result.samples if s.get("phase") == "timed" and "pass" in s}


def timed_walls(result: CellResult) -> list[float]:
    return [s["wall_s"] for s in result.samples if s.get("phase") == "timed"]


# ------------------------------------------------------------------------------------------------
# Drift


@dataclass(frozen=True)
class Drift:
    drift_pct: float | None  # None: not checked (fewer than 2 passes over 2 cells)
    threshold_pct: float
    pass_factors: tuple[float, ...] = ()  # per pass: the cells' median time relative to their own median

    @property
    def noisy(self) -> bool:
        return self.drift_pct is not None and self.drift_pct > self.threshold_pct

    def sentence(self) -> str:
        if self.drift_pct is None:
            return Said("Drift not checked: it needs at least 2 finished interleaved passes over at least 2 cells "
                        "(--passes 3 or more; a stopped sweep may not have finished 2).")
        if not self.noisy:
            return Said("Drift across passes {drift:.1f} % (threshold {threshold:g} %).", drift=self.drift_pct,
                        threshold=self.threshold_pct)
        return Said("Drift across passes {drift:.1f} % (threshold {threshold:g} %): NOISY. The machine's speed changed "
                    "during the sweep, so absolute times (RTF, ms per step) are not reliable. Ratios between cells of "
                    "the same passes hold better, and their intervals show what is left. Stop other work on the "
                    "machine (check the load average) and run the sweep again, with more --passes to narrow the "
                    "intervals.", drift=self.drift_pct, threshold=self.threshold_pct)

    def as_dict(self) -> dict:
        return {"drift_pct": self.drift_pct, "threshold_pct": self.threshold_pct,
                "noisy": None if self.drift_pct is None else self.noisy,
                "pass_factors": list(self.pass_factors), "sentence": self.sentence()}


def drift_of_passes(times: Iterable[dict[int, float]], threshold_pct: float = DEFAULT_DRIFT_THRESHOLD_PCT) -> Drift:
    """Drift from per-cell {pass: seconds}: the spread of the per-pass median relative time (see module doc)."""
    cells = [t for t in times if len(t) >= 2]
    relative: dict[int, list[float]] = {}
    for t in cells:
        mid = median(t.values())
        for pass_no, seconds in t.items():
            relative.setdefault(pass_no, []).append(seconds / mid)
    if len(cells) < 2 or len(relative) < 2:
        return Drift(None, threshold_pct)
    factors = tuple(median(relative[p]) for p in sorted(relative))
    return Drift((max(factors) - min(factors)) * 100, threshold_pct, factors)


def sweep_drift(results: Iterable[CellResult], threshold_pct: float = DEFAULT_DRIFT_THRESHOLD_PCT) -> Drift:
    """The drift of a sweep from its ok cells' raw passes (results must be read with their samples)."""
    return drift_of_passes((timed_by_pass(r) for r in results if r.status == "ok"), threshold_pct)


# ------------------------------------------------------------------------------------------------
# Ratios with intervals


@dataclass(frozen=True)
class Ratio:
    """How many times faster A is than B: median(B) / median(A), with a bootstrap interval (None if n < 2)."""

    ratio: float
    low: float | None
    high: float | None
    confidence: float = CONFIDENCE
    paired: bool = False

    @property
    def holds_ratio(self) -> bool:
        """Whether the interval holds the ratio it is quoted with (a few passes' bootstrap may not)."""
        return self.low is not None and self.low <= self.ratio <= self.high

    @property
    def differs(self) -> bool | None:
        """True when the interval excludes 1; None when there is no interval."""
        return None if self.low is None else not (self.low <= 1.0 <= self.high)

    def phrase(self, a: str = "A", b: str = "B") -> str:
        """'A is 2.1x faster than B (95% CI 1.9-2.3x)', or 'no difference measured' when the interval holds 1."""
        pct = f"{self.confidence * 100:g}%"
        if self.low is None:
            return Said("{a} is {ratio:.3g}x as fast as {b} (too few timed calls for an interval)", a=a, b=b,
                        ratio=self.ratio)
        unstable = "" if self.holds_ratio else Said("; the interval leaves out the ratio itself: too few calls, "
                                                    "measure more")
        if not self.differs:
            return Said("no difference measured between {a} and {b} (ratio {ratio:.3g}x, {pct} CI {low:.3g}-"
                        "{high:.3g}x{unstable})", a=a, b=b, ratio=self.ratio, pct=pct, low=self.low, high=self.high,
                        unstable=unstable)
        if self.ratio >= 1:
            return Said("{a} is {ratio:.3g}x faster than {b} ({pct} CI {low:.3g}-{high:.3g}x{unstable})", a=a, b=b,
                        ratio=self.ratio, pct=pct, low=self.low, high=self.high, unstable=unstable)
        return Said("{a} is {ratio:.3g}x faster than {b} ({pct} CI {low:.3g}-{high:.3g}x{unstable})", a=b, b=a,
                    ratio=1 / self.ratio, pct=pct, low=1 / self.high, high=1 / self.low, unstable=unstable)

    def as_dict(self) -> dict:
        return {"ratio": self.ratio, "ci_low": self.low, "ci_high": self.high, "confidence": self.confidence,
                "paired": self.paired}


def _median_ratio(a, b, axis=-1):
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def speed_ratio(a: Sequence[float], b: Sequence[float], paired: bool = False,
                confidence: float = CONFIDENCE) -> Ratio:
    """A's speed over B's from their raw times (seconds per call, same work): median(b) / median(a).

    `paired`: a[i] and b[i] were measured together (the same pass): resampled as pairs.
    """
    from scipy.stats import bootstrap  # scipy is heavy to import: only when a ratio is asked for

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("a ratio needs timed calls on both sides")
    if paired and a.size != b.size:
        raise ValueError(f"paired samples must have the same length, got {a.size} and {b.size}")
    value = float(_median_ratio(a, b))
    if a.size < 2 or b.size < 2:
        return Ratio(value, None, None, confidence, paired)
    with warnings.catch_warnings():  # identical samples give a degenerate (zero-width) interval: that is the answer
        warnings.simplefilter("ignore")
        ci = bootstrap((a, b), _median_ratio, paired=paired, vectorized=True, confidence_level=confidence,
                       n_resamples=BOOTSTRAP_RESAMPLES, method="percentile", rng=np.random.default_rng(0)
                       ).confidence_interval
    # The interval is the bootstrap's, as it came: with a handful of passes it can stop short of the observed
    # ratio, and then the phrase says so rather than stretch it to look tidy.
    return Ratio(value, float(ci.low), float(ci.high), confidence, paired)


def cell_ratio(a: CellResult, b: CellResult, confidence: float = CONFIDENCE) -> Ratio:
    """A's speed over B's from two cells' raw timed calls, paired by pass when both ran the same passes."""
    pa, pb = timed_by_pass(a), timed_by_pass(b)
    common = sorted(set(pa) & set(pb))
    if len(common) >= 2 and len(common) == len(pa) == len(pb):
        return speed_ratio([pa[p] for p in common], [pb[p] for p in common], paired=True, confidence=confidence)
    return speed_ratio(timed_walls(a), timed_walls(b), confidence=confidence)


def sweep_ratios(results: Sequence[CellResult]):
    """Every ok cell against the first ok cell doing the same work (batch, tokens, streaming), with a phrase each.

    A DataFrame: cell, baseline, ratio, ci_low, ci_high, confidence, paired, phrase
    ("<cell> is 2.1x faster than <baseline> (95% CI 1.9-2.3x)"). Ratios are of wall time per call, so only
    cells whose calls do the same work are compared.
    """
    import pandas as pd

    baselines: dict[tuple, CellResult] = {}
    rows = []
    for r in results:
        if r.status != "ok" or not timed_walls(r):
            continue
        work = (r.config.batch_size, r.config.tokens, r.config.stream)
        base = baselines.setdefault(work, r)
        if base is r:
            continue
        ratio = cell_ratio(r, base)
        rows.append({"cell": r.config.label, "baseline": base.config.label, **ratio.as_dict(),
                     "phrase": ratio.phrase(r.config.label, base.config.label)})
    return pd.DataFrame(rows, columns=["cell", "baseline", "ratio", "ci_low", "ci_high", "confidence", "paired",
                                       "phrase"])


# ------------------------------------------------------------------------------------------------
# One record for reports and the app


def comparison_record(results: Sequence[CellResult], notes: dict, threshold_pct: float) -> dict:
    """Everything a report shows about a sweep's comparisons: the plan, each pass's order, the drift, every
    ratio with its interval and phrase, and every cell's raw time per pass. Plain JSON types."""
    drift = sweep_drift(results, threshold_pct)
    return {
        "plan": notes.get("plan"), "pass_orders": notes.get("pass_orders", []), "drift": drift.as_dict(),
        "ratios": sweep_ratios(results).to_dict(orient="records"),
        "passes": [{"cell": r.config.label, "key": r.config.key, "status": r.status, "cpu_share": r.cpu_share,
                    "wall_s_by_pass": {str(p): w for p, w in sorted(timed_by_pass(r).items())}}
                   for r in results if timed_by_pass(r)],
    }


def sweep_comparison(db_path, sweep_id: int) -> dict:
    """comparison_record() of a stored sweep (the app's call: drift, noisy flag, ratio phrases, raw passes)."""
    from chattts_lab.history.store import Store

    with Store(db_path) as store:
        sweep = store.sweep(sweep_id)
        if sweep is None:
            raise KeyError(f"no sweep {sweep_id} in {db_path}")
        results, notes = store.results(sweep_id), store.notes(sweep_id)
    threshold = sweep["spec"].get("drift_threshold_pct", DEFAULT_DRIFT_THRESHOLD_PCT)
    return comparison_record(results, notes, threshold)


def compare_sweeps(db_path, sweep_ids: Sequence[int]):
    """The same configurations on several sweeps (machines, days): each later sweep against the first, per
    configuration, with an interval, in the order of frames.compare_frame's table. A DataFrame: configuration,
    sweep, baseline_sweep, ratio, ci_low, ci_high, phrase ("cpu stock fp32 batch 1 2 thr 32 tok: sweep 5 is 1.2x
    faster than sweep 3 (95% CI ...)")."""
    import pandas as pd

    from chattts_lab.history.store import Store

    sweep_ids = list(dict.fromkeys(sweep_ids))
    with Store(db_path) as store:
        by_sweep = {sid: _by_configuration(store.results(sid)) for sid in sweep_ids}
    first, rows = sweep_ids[0], []
    for key, base in sorted(by_sweep.get(first, {}).items()):
        for sid in sweep_ids[1:]:
            other = by_sweep.get(sid, {}).get(key)
            if other is None:
                continue
            # different sweeps never share passes: their calls are resampled independently
            ratio = speed_ratio(timed_walls(other), timed_walls(base))
            label = base.config.label
            rows.append({"configuration": label, "sweep": sid, "baseline_sweep": first, **ratio.as_dict(),
                         "phrase": f"{label}: {ratio.phrase(f'sweep {sid}', f'sweep {first}')}"})
    return pd.DataFrame(rows, columns=["configuration", "sweep", "baseline_sweep", "ratio", "ci_low", "ci_high",
                                       "confidence", "paired", "phrase"])


def _by_configuration(results: Sequence[CellResult]) -> dict[tuple, CellResult]:
    """A sweep's ok cells by the comparison table's configuration columns (the first of each, as the table)."""
    from chattts_lab.history.frames import COMPARE_KEYS

    out: dict[tuple, CellResult] = {}
    for r in results:
        if r.status == "ok" and timed_walls(r):
            row = r.row()
            out.setdefault(tuple(row[k] for k in COMPARE_KEYS), r)
    return out
