"""Which configuration to use here: the Pareto front of a sweep and the fastest cell under a memory budget.

Pure functions over canonical result rows (sweep.CANONICAL_COLUMNS); no plotting, no UI.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


def pareto_mask(df: pd.DataFrame, x: str = "latency_p50_s", y: str = "audio_s_per_s") -> pd.Series:
    """True for ok cells no other ok cell beats on both lower `x` (latency) and higher `y` (throughput)."""
    mask = pd.Series(False, index=df.index)
    ok = df[(df["status"] == "ok") & df[x].notna() & df[y].notna()]
    for i, row in ok.iterrows():
        dominated = ((ok[x] <= row[x]) & (ok[y] >= row[y]) & ((ok[x] < row[x]) | (ok[y] > row[y]))).any()
        mask[i] = not dominated
    return mask


@dataclass(frozen=True)
class Recommendation:
    settings: dict | None  # device, precision, threads, engine (what the synthesis tab applies); None when nothing fits
    reason: str


def recommend(df: pd.DataFrame, memory_budget_mb: float | None = None) -> Recommendation:
    """The ok cell with the lowest RTF at batch 1 (one person waiting for one sentence) within the budget.

    RTF (wall seconds per audio second) makes cells with different token counts comparable. Cells
    measured only at larger batches are used when no batch-1 cell exists.
    """
    ok = df[(df["status"] == "ok") & df["rtf"].notna()] if len(df) else df
    if ok.empty:
        return Recommendation(None, "No successful cells yet: run a sweep first (failed cells cannot be recommended).")
    single = ok[ok["batch_size"] == 1]
    pool = single if not single.empty else ok
    over = pool[pool["peak_rss_mb"] > memory_budget_mb] if memory_budget_mb else pool.iloc[0:0]
    fits = pool.drop(over.index)
    if fits.empty:
        lightest = pool.sort_values("peak_rss_mb").iloc[0]
        return Recommendation(None, f"No configuration fits in {memory_budget_mb:,.0f} MB: the lightest "
                                    f"({_name(lightest)}) peaks at {lightest['peak_rss_mb']:,.0f} MB.")
    ranked = fits.sort_values(["rtf", "peak_rss_mb"])
    best = ranked.iloc[0]
    speed = "faster" if best["rtf"] < 1 else "slower"
    factor = 1 / best["rtf"] if best["rtf"] < 1 else best["rtf"]
    lines = [f"**{_name(best)}**: RTF {best['rtf']:.2f} ({factor:.1f}× {speed} than real time), "
             f"p50 latency {best['latency_p50_s']:.2f} s for {int(best['tokens'])} tokens, "
             f"peak RSS {best['peak_rss_mb']:,.0f} MB"
             + (f" (budget {memory_budget_mb:,.0f} MB)" if memory_budget_mb else "") + "."]
    lines += _floor_sentence(best)
    if len(ranked) > 1:
        runner = ranked.iloc[1]
        lines.append(f"Next: {_name(runner)} at RTF {runner['rtf']:.2f}.")
    if not over.empty:
        lines.append(f"Left out over the memory budget: {', '.join(_name(r) for _, r in over.iterrows())}.")
    if single.empty:
        lines.append("No batch-1 cells were measured, so this compares larger batches.")
    settings = {"device": str(best["device"]), "precision": str(best["precision"]), "threads": int(best["threads"]),
                "engine": str(best["engine"])}
    return Recommendation(settings, " ".join(lines))


def _floor_sentence(row: pd.Series) -> list[str]:
    """How far its GPT step is from the memory-bandwidth floor, where the sweep measured one."""
    if pd.isna(row.get("roofline")):
        return []
    return [f"Its GPT step takes {row['step_ms']:.1f} ms against a floor of {row['floor_step_ms']:.1f} ms (reading "
            f"{row['weight_mb_per_step']:,.0f} MB of weights at {row['mem_read_gbps']:.1f} GB/s): roofline "
            f"{row['roofline']:.2f}, {1 / row['roofline']:.1f}× the floor."]


def _name(row: pd.Series) -> str:
    return f"{row['device']} · {row['engine']} · {row['precision']} · {int(row['threads'])} threads"


# ------------------------------------------------------------------------------------------------
# What the app serves by default: a sweep replaces the default only with a configuration measured faster


SERVING_KEYS = ("engine", "precision", "device", "threads")
MIN_GAIN = 0.05  # faster only when its RTF is lower by more than this share: a quiet machine drifts about 5 %


def faster_than_default(cells: pd.DataFrame, sweeps: pd.DataFrame, model: str, default: dict,
                        machine: str | None = None) -> Recommendation:
    """The configuration measured faster than `default` (engine, precision, device, threads) at batch 1, on this
    machine, this model and the default's device; else settings None and the reason the default stays.

    `cells` and `sweeps` are store.cells_frame() and store.sweeps_frame() of the history. Rows count only from
    this machine's own sweeps (not imported, not on Ray nodes, not noisy) of the same model and device, with
    `machine` (the environment summary) matching when given. A candidate is compared with the default as measured
    in its own sweep when that sweep measured it, else as measured in the latest sweep that did.
    """
    rows, left_out = usable_rows(cells, sweeps, model, default["device"], machine)
    why_not = f" Left out: {'; '.join(left_out)}." if left_out else ""
    is_default = _matches(rows, default)
    if not is_default.any():
        return Recommendation(None, f"The default ({_name(default)}) stays: no usable sweep on this machine measured "
                                    f"it at batch 1 with model {model}, so nothing is known to be faster (a sweep "
                                    f"that includes it can replace it).{why_not}")
    baseline = rows[is_default].groupby("sweep_id")["rtf"].median()
    latest = baseline.index.max()
    candidates = rows[~is_default].copy()
    candidates["against"] = candidates["sweep_id"].map(lambda s: s if s in baseline.index else latest)
    candidates["default_rtf"] = candidates["against"].map(baseline)
    faster = candidates[candidates["rtf"] < candidates["default_rtf"] * (1 - MIN_GAIN)]
    if faster.empty:
        return Recommendation(None, f"The default ({_name(default)}) stays: no configuration measured here ran "
                                    f"more than {MIN_GAIN:.0%} faster (its RTF {baseline[latest]:.2f} in sweep "
                                    f"#{int(latest)}).{why_not}")
    best = faster.sort_values(["rtf", "peak_rss_mb"]).iloc[0]
    settings = {k: (int(best[k]) if k == "threads" else str(best[k])) for k in SERVING_KEYS}
    return Recommendation(settings, f"{_name(best)}: RTF {best['rtf']:.2f} against {best['default_rtf']:.2f} for the "
                                    f"default ({_name(default)}), both measured at batch 1 on this machine "
                                    f"(sweep #{int(best['sweep_id'])}"
                                    + (f", the default in sweep #{int(best['against'])}"
                                       if best["against"] != best["sweep_id"] else "") + f").{why_not}")


def usable_rows(cells: pd.DataFrame, sweeps: pd.DataFrame, model: str, device: str,
                machine: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The ok batch-1 rows that can judge what this app serves, and why the other sweeps' rows cannot."""
    left_out, keep = [], []
    for _, sweep in sweeps[sweeps["kind"] == "sweep"].iterrows():  # a serving benchmark has no cells
        reason = _sweep_unusable(sweep, model, machine)
        if reason:
            left_out.append(f"sweep #{int(sweep['id'])} {reason}")
        else:
            keep.append(int(sweep["id"]))
    rows = cells[cells["sweep_id"].isin(keep) & (cells["status"] == "ok") & cells["rtf"].notna()]
    on_nodes = rows[rows["node"].notna() & (rows["node"] != "")]
    for sweep_id in sorted(set(on_nodes["sweep_id"])):
        left_out.append(f"sweep #{int(sweep_id)} ran on Ray nodes, not on this machine")
    rows = rows.drop(on_nodes.index)
    return rows[(rows["device"] == device) & (rows["batch_size"] == 1)], left_out


def _sweep_unusable(sweep: pd.Series, model: str, machine: str | None) -> str | None:
    if sweep["origin"] != "local":
        return "was imported from another machine"
    if machine is not None and sweep["machine"] != machine:
        return f"ran on another machine ({sweep['machine']})"
    if sweep["model"] != model:
        return f"measured model {sweep['model']}, not {model}"
    if sweep["noisy"] is True or sweep["noisy"] == 1:
        return f"was noisy ({sweep['drift_pct']:.1f} % drift across its passes)"
    return None


def _matches(rows: pd.DataFrame, settings: dict) -> pd.Series:
    mask = pd.Series(True, index=rows.index)
    for key in SERVING_KEYS:
        mask &= rows[key].astype(int if key == "threads" else str) == (int(settings[key]) if key == "threads"
                                                                       else str(settings[key]))
    return mask
