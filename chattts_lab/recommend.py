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
