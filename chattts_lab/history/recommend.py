"""Which configuration to use here: the Pareto front of a sweep and the fastest cell under a memory budget; the
configuration an app serves by default (its served default, replaced only by one measured faster on this machine);
the fastest within a quality floor, and the precision to use for each text length.

Pure functions over canonical result rows (chattts_lab.sweep.results.CANONICAL_COLUMNS); no plotting, no UI.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import pandas as pd

from chattts_lab.quality import NOT_MEANINGFUL
from chattts_lab.said import Said


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
        return Recommendation(None, Said("No successful cells yet: run a sweep first (failed cells cannot be "
                                         "recommended)."))
    single = ok[ok["batch_size"] == 1]
    pool = single if not single.empty else ok
    over = pool[pool["peak_rss_mb"] > memory_budget_mb] if memory_budget_mb else pool.iloc[0:0]
    fits = pool.drop(over.index)
    if fits.empty:
        lightest = pool.sort_values("peak_rss_mb").iloc[0]
        return Recommendation(None, Said("No configuration fits in {budget:,.0f} MB: the lightest ({name}) peaks at "
                                         "{peak:,.0f} MB.", budget=memory_budget_mb, name=_name(lightest),
                                         peak=lightest["peak_rss_mb"]))
    ranked = fits.sort_values(["rtf", "peak_rss_mb"])
    best = ranked.iloc[0]
    lines = [_best_sentence(best, memory_budget_mb), *_floor_sentence(best)]
    if len(ranked) > 1:
        runner = ranked.iloc[1]
        lines.append(Said("Next: {name} at RTF {rtf:.2f}.", name=_name(runner), rtf=runner["rtf"]))
    if not over.empty:
        lines.append(Said("Left out over the memory budget: {names}.",
                          names=Said.joined((_name(r) for _, r in over.iterrows()), ", ")))
    if single.empty:
        lines.append(Said("No batch-1 cells were measured, so this compares larger batches."))
    settings = {"device": str(best["device"]), "precision": str(best["precision"]), "threads": int(best["threads"]),
                "engine": str(best["engine"])}
    return Recommendation(settings, Said.joined(lines))


def _best_sentence(best: pd.Series, memory_budget_mb: float | None) -> Said:
    speed = Said("faster") if best["rtf"] < 1 else Said("slower")
    factor = 1 / best["rtf"] if best["rtf"] < 1 else best["rtf"]
    latency = "" if pd.isna(best["latency_p50_s"]) else Said(", p50 latency {latency:.2f} s for {tokens} tokens",
                                                             latency=best["latency_p50_s"], tokens=int(best["tokens"]))
    memory = "" if pd.isna(best["peak_rss_mb"]) else Said(", peak RSS {peak:,.0f} MB", peak=best["peak_rss_mb"])
    budget = Said(" (budget {budget:,.0f} MB)", budget=memory_budget_mb) if memory_budget_mb else ""
    return Said("**{name}**: RTF {rtf:.2f} ({factor:.1f}× {speed} than real time){latency}{memory}{budget}.",
                name=_name(best), rtf=best["rtf"], factor=factor, speed=speed, latency=latency, memory=memory,
                budget=budget)


def _floor_sentence(row: pd.Series) -> list[str]:
    """How far its GPT step is from the memory-bandwidth floor, where the sweep measured one."""
    if pd.isna(row.get("roofline")):
        return []
    return [Said("Its GPT step takes {step:.1f} ms against a floor of {floor:.1f} ms (reading {weights:,.0f} MB of "
                 "weights at {gbps:.1f} GB/s): roofline {roofline:.2f}, {times:.1f}× the floor.", step=row["step_ms"],
                 floor=row["floor_step_ms"], weights=row["weight_mb_per_step"], gbps=row["mem_read_gbps"],
                 roofline=row["roofline"], times=1 / row["roofline"])]


def _name(row: pd.Series) -> str:
    return Said("{device} · {engine} · {precision} · {threads} threads", device=row["device"], engine=row["engine"],
                precision=row["precision"], threads=int(row["threads"]))


# ----------------------------------------------------------------------------------------------
# The configuration an app serves by default


@dataclass(frozen=True)
class ServedDefault:
    settings: dict  # device, precision, threads, engine
    reason: str  # why this one, in a sentence the page shows
    fastest: dict | None = None  # the fastest configuration measured here, when it is not the one served


def served_default(cells: pd.DataFrame, sweeps: pd.DataFrame, model: str, default: dict,
                   cannot_run: Callable[[dict], str | None]) -> ServedDefault:
    """What an app on `model` serves: its `default`, replaced only by a configuration measured faster than it on
    this machine, this model and this device (a local sweep that is not noisy and did not run on Ray nodes).

    `cells` and `sweeps` are the history's frames (frames.cells_frame, frames.sweeps_frame); `cannot_run(settings)`
    says why a configuration cannot run in this app (None when it can). The default is compared with the
    candidate as measured in the same sweep, else in the history, else by the engines' reference figures, and the
    reason says which.
    """
    eligible, why_not = _eligible_sweeps(sweeps, model)
    mine = cells[cells["sweep_id"].isin(eligible["id"]) & (cells["status"] == "ok") & cells["rtf"].notna()
                 & (cells["node"].fillna("") == "")] if len(eligible) else cells.iloc[0:0]
    if mine.empty:  # nothing measured on this machine itself (Ray nodes' cells are theirs)
        return ServedDefault(default, Said("{why}, so the default stays", why=why_not) if why_not
                             else Said("no sweep on this machine yet"))
    chosen = _served_from(mine, default, cannot_run)
    if why_not:
        chosen = replace(chosen, reason=Said("{reason} ({why}, so it did not count)", reason=chosen.reason, why=why_not))
    return chosen


def _served_from(mine: pd.DataFrame, default: dict, cannot_run) -> ServedDefault:
    """The served default from this machine's usable cells (at least one)."""
    sweep_id = int(mine["sweep_id"].max())  # the latest sweep with cells of its own
    runnable = mine[[cannot_run(_settings(r)) is None for _, r in mine.iterrows()]]
    latest = runnable[runnable["sweep_id"] == sweep_id]
    note = _unrunnable_note(mine[mine["sweep_id"] == sweep_id], cannot_run)
    rec = recommend(latest)
    if rec.settings is None:
        return ServedDefault(default, Said("sweep #{sweep} measured nothing that runs in this app{note}", sweep=sweep_id,
                                           note=note))
    candidate = rec.settings
    fastest = _fastest(runnable)
    if _same(candidate, default):
        return ServedDefault(candidate, Said("the recommendation of sweep #{sweep} on this machine (lowest RTF at "
                                             "batch 1), which is also the default{note}", sweep=sweep_id, note=note),
                             _unless_same(fastest, candidate))
    faster, how = _faster_than_default(candidate, default, latest, runnable)
    if faster:
        return ServedDefault(candidate, Said("the recommendation of sweep #{sweep} on this machine (lowest RTF at "
                                             "batch 1), faster than the default {default} {how}{note}", sweep=sweep_id,
                                             default=_label(default), how=how, note=note),
                             _unless_same(fastest, candidate))
    return ServedDefault(default, Said("the default, {default}: sweep #{sweep}'s fastest, {fastest}, is not faster "
                                       "than it {how}{note}", default=_label(default), sweep=sweep_id,
                                       fastest=_label(candidate), how=how, note=note),
                         _faster_offer(fastest, default, runnable))


def _eligible_sweeps(sweeps: pd.DataFrame, model: str) -> tuple[pd.DataFrame, str]:
    """The local sweeps (newest first) that may set the default, and why the latest local one may not."""
    if sweeps.empty:
        return sweeps, ""
    local = sweeps[(sweeps["origin"] == "local") & (sweeps["kind"] == "sweep")].sort_values("id", ascending=False)
    reasons = {}
    for _, s in local.iterrows():
        if s["model"] != model:
            reasons[s["id"]] = Said("sweep #{sweep} measured the model {measured!r}, not this app's {model!r}",
                                    sweep=s["id"], measured=s["model"], model=model)
        elif s["noisy"] is True or s["noisy"] == 1:
            reasons[s["id"]] = Said("sweep #{sweep} was noisy (its passes drifted {drift:.1f} %)", sweep=s["id"],
                                    drift=s["drift_pct"])
    eligible = local[~local["id"].isin(list(reasons))]
    latest = int(local["id"].iloc[0]) if len(local) else None
    return eligible, reasons.get(latest, "")


def _faster_than_default(candidate: dict, default: dict, latest: pd.DataFrame, history: pd.DataFrame):
    """Whether the candidate beats the default, and how that was judged (for the reason)."""
    cand = _best_rtf(latest, candidate)
    for frame, where in ((latest, Said("in the same sweep")), (history, Said("in this machine's history"))):
        base = _best_rtf(frame, default)
        if base is not None:
            return cand < base, Said("(RTF {cand:.2f} against {base:.2f} {where})", cand=cand, base=base, where=where)
    from chattts_lab import engines

    def reference(s):
        return engines.get(s["engine"]).reference_step_ms.get(s["precision"], float("inf"))

    c, d = reference(candidate), reference(default)
    return c < d, Said("by the engines' reference figures ({c:g} against {d:g} ms per step; the default was not "
                       "measured here)", c=c, d=d)


def _best_rtf(frame: pd.DataFrame, settings: dict) -> float | None:
    same = frame[(frame["engine"] == settings["engine"]) & (frame["precision"] == settings["precision"])
                 & (frame["device"] == settings["device"])]
    single = same[same["batch_size"] == 1]
    pool = single if len(single) else same
    return float(pool["rtf"].min()) if len(pool) else None


def _fastest(frame: pd.DataFrame) -> dict | None:
    single = frame[frame["batch_size"] == 1]
    pool = single if len(single) else frame
    return _settings(pool.sort_values("rtf").iloc[0]) if len(pool) else None


def _unrunnable_note(frame: pd.DataFrame, cannot_run) -> str:
    rec = recommend(frame)
    reason = cannot_run(rec.settings) if rec.settings else None
    return Said("; its fastest cell, {label}, cannot run in this app: {reason}", label=_label(rec.settings),
                reason=reason) if reason else ""


def _settings(row: pd.Series) -> dict:
    return {"device": str(row["device"]), "precision": str(row["precision"]), "threads": int(row["threads"]),
            "engine": str(row["engine"])}


def _same(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("device", "precision", "engine"))


def _unless_same(fastest: dict | None, served: dict) -> dict | None:
    return None if fastest is None or fastest == served else fastest


def _faster_offer(fastest: dict | None, default: dict, history: pd.DataFrame) -> dict | None:
    """What "Use the fastest" offers while the default serves: the fastest measured here, only if it beats the
    default as the served default is judged (a button naming a slower configuration "the fastest" would mislead)."""
    if _unless_same(fastest, default) is None:
        return None
    return fastest if _faster_than_default(fastest, default, history, history)[0] else None


def _label(s: dict) -> str:
    return Said("{engine} · {precision} · {device} · {threads} {thread}", engine=s["engine"], precision=s["precision"],
                device=s["device"], threads=s["threads"], thread="thread" if s["threads"] == 1 else "threads")


# ------------------------------------------------------------------------------------------------
# Speed within a quality floor (chattts_lab.quality: columns scored beside stock fp32 on the same device)

MOS_DROP = 0.2  # predicted-MOS points a configuration may lose against stock fp32
WER_RISE_PTS = 2.0  # word-error-rate points (percent) it may add


def quality_pool(df: pd.DataFrame) -> pd.DataFrame:
    """Ok cells with an RTF and quality figures, one person waiting (batch 1) where such cells exist."""
    if df.empty or "quality_mos_delta" not in df:
        return df.iloc[0:0]
    ok = df[(df["status"] == "ok") & df["rtf"].notna() & df["quality_mos_delta"].notna()
            & df["quality_wer_delta_pts"].notna()]
    single = ok[ok["batch_size"] == 1]
    return single if not single.empty else ok


def why_no_quality(df: pd.DataFrame) -> str:
    """Why rows carry no quality figure: their note (synthetic weights, a failure), or that none was measured."""
    notes = [n for n in df["quality_note"].dropna().unique() if n] if "quality_note" in df else []
    if NOT_MEANINGFUL in notes:
        return Said("quality is {why}", why=NOT_MEANINGFUL)
    return notes[0] if notes else Said("no quality was measured (run the sweep with --quality)")


def recommend_within_quality(df: pd.DataFrame, mos_drop: float = MOS_DROP,
                             wer_rise_pts: float = WER_RISE_PTS) -> Recommendation:
    """The fastest configuration (lowest RTF) within `mos_drop` of predicted MOS and `wer_rise_pts` points of WER of
    stock fp32 on its device, with what was left out for quality."""
    pool = quality_pool(df)
    if pool.empty:
        return Recommendation(None, Said("No recommendation under a quality floor: {why}.", why=why_no_quality(df)))
    fits = (pool["quality_mos_delta"] >= -mos_drop) & (pool["quality_wer_delta_pts"] <= wer_rise_pts)
    ranked = pool[fits].sort_values(["rtf", "peak_rss_mb"])
    floor = Said("within {mos:g} MOS and {wer:g} points of WER of stock fp32", mos=mos_drop, wer=wer_rise_pts)
    if ranked.empty:
        return Recommendation(None, Said("No configuration is {floor}.", floor=floor))
    best = ranked.iloc[0]
    lines = [Said("**{name}** is the fastest {floor}: RTF {rtf:.2f}, {quality}.", name=_name(best), floor=floor,
                  rtf=best["rtf"], quality=_quality_phrase(best))]
    faster = pool[~fits & (pool["rtf"] < best["rtf"])].sort_values("rtf")
    if not faster.empty:
        lines.append(Said("Faster but below the floor: {rows}.", rows=Said.joined(
            (Said("{name} (RTF {rtf:.2f}, {quality})", name=_name(r), rtf=r["rtf"], quality=_quality_phrase(r))
             for _, r in faster.iterrows()), "; ")))
    if isinstance(best.get("quality_models"), str):
        lines.append(Said("Quality models: {models}.", models=best["quality_models"]))
    settings = {"device": str(best["device"]), "precision": str(best["precision"]), "threads": int(best["threads"]),
                "engine": str(best["engine"])}
    return Recommendation(settings, Said.joined(lines))


def _quality_phrase(row: pd.Series) -> str:
    similarity = Said(", speaker similarity {sim:.2f}", sim=row["quality_speaker_sim"]) \
        if pd.notna(row.get("quality_speaker_sim")) else ""
    return Said("MOS {mos:.2f} ({mos_delta:+.2f}), WER {wer:.1f} % ({wer_delta:+.1f} points){similarity}",
                mos=row["quality_mos"], mos_delta=row["quality_mos_delta"], wer=row["quality_wer_pct"],
                wer_delta=row["quality_wer_delta_pts"], similarity=similarity)


def precision_by_length(df: pd.DataFrame, by_length: list[dict], mos_drop: float = MOS_DROP,
                        wer_rise_pts: float = WER_RISE_PTS) -> list[dict]:
    """The "precision by text length" policy as measured: for each length of the fixed texts, the fastest
    configuration whose clips of that length stay within the floor of the reference's clips of that length.
    `by_length`: the sweep's quality note rows (config "device|engine|precision", length, the figure columns)."""
    pool = quality_pool(df)
    if pool.empty or not by_length:
        return []
    rtf = pool.assign(config=pool["device"] + "|" + pool["engine"] + "|" + pool["precision"]).groupby("config")["rtf"].min()
    rows = pd.DataFrame(by_length)
    rows = rows[rows["config"].isin(rtf.index)].assign(rtf=lambda r: r["config"].map(rtf))
    policy = []
    for length in dict.fromkeys(rows["length"]):
        at = rows[rows["length"] == length].copy()
        reference = at.set_index("config")
        ref_key = at["config"].str.split("|").str[0] + "|stock|fp32"
        at["mos_delta"] = at["quality_mos"].values - reference["quality_mos"].reindex(ref_key).values
        at["wer_delta"] = at["quality_wer_pct"].values - reference["quality_wer_pct"].reindex(ref_key).values
        fits = at[(at["mos_delta"] >= -mos_drop) & (at["wer_delta"] <= wer_rise_pts)].sort_values("rtf")
        best = fits.iloc[0] if not fits.empty else None
        policy.append({"length": length, "config": None if best is None else best["config"],
                       "rtf": None if best is None else float(best["rtf"]),
                       "quality_mos_delta": None if best is None else float(best["mos_delta"]),
                       "quality_wer_delta_pts": None if best is None else float(best["wer_delta"])})
    return policy
