"""The History tab's handlers (load, compare, bundles), the report files, and the recommendation."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from chattts_lab.trackers import env as lab_env
from chattts_lab.history import plots
from chattts_lab.history.compare import compare_sweeps as compare_ratios
from chattts_lab.history.compare import sweep_comparison
from chattts_lab.history.recommend import recommend
from chattts_lab.history.report import write_reports
from chattts_lab.history.bundle import BundleError, export_bundle, import_bundle
from chattts_lab.history.frames import cells_frame, compare_frame, sweeps_frame
from chattts_lab.history.store import Store
from chattts_lab.said import Said
from chattts_lab.serve.context import AppContext
from webui.common import present
from webui.i18n.texts import localized, translator
from webui.benchmark.sweep_run import SweepUpdate

HISTORY_COLUMNS = ["id", "created_at", "kind", "status", "origin", "machine", "model", "n_cells", "n_ok", "drift_pct",
                   "noisy", "usd_per_hour", "price_source"]
COMPARE_METRICS = ["latency_p50_s", "rtf", "audio_s_per_s", "usd_per_audio_hour", "step_ms", "peak_rss_mb", "ttfa_s"]


def _sweep_choices(frame: pd.DataFrame, kinds=("sweep", "serve")) -> list[tuple[str, int]]:
    """History's runs as picker entries; a serving run says so (its rows are load levels, not cells)."""
    return [(f"#{r.id} {r.created_at[:19]} {r.status} · {r.machine or '?'} · "
             + (f"{r.n_ok}/{r.n_cells} ok" if r.kind == "sweep" else "serving run (its levels are in the Serving tab)"),
             int(r.id)) for r in frame.itertuples() if r.kind in kinds]


def load_sweeps(ctx: AppContext, sweep_ids) -> SweepUpdate:
    """Stored sweeps, to show in the results table and plots."""
    if not sweep_ids:
        raise gr.Error("Show in the Sweep tab: pick one or more sweeps in the Sweeps box first.")
    ids = [int(i) for i in sweep_ids]
    df = cells_frame(ctx.history_db, ids)
    with Store(ctx.history_db) as store:  # the same rows in the same order as cells_frame, with their timed calls
        cells = [r for sid in ids if store.sweep(sid) for r in store.results(sid)]
    return SweepUpdate(results=df, status=Said("Showing sweep(s) {ids}.", ids=", ".join(map(str, sweep_ids))),
                       cells=cells)


def compare_sweeps(ctx: AppContext, a, b, metric: str, request=None):
    """(side-by-side table, figure, markdown naming each sweep's machine and giving each configuration's speed
    ratio, B against A, with its interval), in the language of `request`'s browser."""
    if a is None or b is None or a == b:
        raise gr.Error("Compare: pick two different sweeps, as Sweep A and Sweep B.")
    ids = [int(a), int(b)]
    table = present.rounded(compare_frame(ctx.history_db, ids, metric))
    fig = plots.compare_machines(cells_frame(ctx.history_db, ids), metric, translator(request))
    envs = []
    with Store(ctx.history_db) as store:
        for sid in ids:
            sweep = store.sweep(sid)
            envs.append(f"- **#{sid}** ({sweep['created_at'][:16]}): {lab_env.summary(sweep['environment'])}"
                        if sweep else f"- #{sid}: {localized('missing', request)}")
    ratios = compare_ratios(ctx.history_db, ids)  # from each configuration's raw timed calls, with an interval
    speeds = [f"- {r.configuration}: {localized(r.phrase, request)}" for r in ratios.itertuples()] or [
        f"- {localized('no configuration ok in both', request)}"]
    speed = localized(Said("**Speed, sweep #{b} against #{a}:**", a=ids[0], b=ids[1]), request)
    return table, fig, "\n".join(envs + ["", speed, *speeds])


KEPT_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"  # bundles committed with the app


def kept_results() -> list[tuple[str, str]]:
    """The bundles kept in docs/results, as dropdown choices: (file name, path)."""
    return [(path.stem, str(path)) for path in sorted(KEPT_RESULTS.glob("*.json"))]


def import_bundle_handler(ctx: AppContext, file, request: gr.Request = None):
    if not file:
        return gr.skip()
    try:
        new, skipped = import_bundle(ctx.history_db, file)
    except BundleError as exc:
        present.warn(Said("Could not import that bundle: {why}", why=str(exc)), request)
        return None
    present.info(Said("Imported sweep(s) {ids}; {skipped} already present.",
                           ids=", ".join(map(str, new)) or Said("none"), skipped=len(skipped)), request)
    return None


def export_bundle_handler(ctx: AppContext, sweep_ids, request: gr.Request = None):
    if not sweep_ids:
        raise gr.Error("Export bundle: pick the sweeps to export in the Sweeps box first.")
    out = ctx.files_dir / f"bundle-{uuid.uuid4().hex[:8]}" / "chattts-lab-bundle.json"
    return str(export_bundle(ctx.history_db, out, [int(i) for i in sweep_ids]))


def download_reports(ctx: AppContext, df: pd.DataFrame | None, sweep_id, request: gr.Request = None):
    if df is None or len(df) == 0:
        raise gr.Error("Download: run a sweep, or Show one from the History tab, first.")
    env, fidelity, meta, comparisons = {}, [], None, None
    ids = sorted(set(df["sweep_id"])) if "sweep_id" in df else [sweep_id] if sweep_id else []
    if len(ids) == 1:
        with Store(ctx.history_db) as store:
            sweep = store.sweep(int(ids[0]))
            fidelity = store.fidelity(int(ids[0]))
        if sweep:
            env, meta = sweep["environment"], {k: sweep[k] for k in ("id", "uuid", "created_at", "status", "spec")}
            comparisons = sweep_comparison(ctx.history_db, int(ids[0]))  # drift and every ratio with its interval
    frame = df.drop(columns=[c for c in ("sweep_id", "machine", "created_at") if c in df])
    out_dir = ctx.files_dir / f"report-{uuid.uuid4().hex[:8]}"
    paths = write_reports(frame, env, fidelity, out_dir, ("csv", "json", "html"), meta, comparisons=comparisons)
    return [str(p) for p in paths.values()]


def recommend_for(df: pd.DataFrame | None, budget_mb: float | None):
    """(the recommendation's sentence, the settings the Synthesis tab applies or None)."""
    rec = recommend(df if df is not None else pd.DataFrame(), float(budget_mb) if budget_mb else None)
    return rec.reason, rec.settings



@dataclass(frozen=True)
class HistoryView:
    """The History tab's list of sweeps and every picker that offers them."""

    table: gr.DataFrame
    pick: gr.Dropdown
    cmp_a: gr.Dropdown
    cmp_b: gr.Dropdown

    def outputs(self) -> set:
        return {self.table, self.pick, self.cmp_a, self.cmp_b}

    def refresh(self, ctx: AppContext) -> dict:
        frame = sweeps_frame(ctx.history_db)
        show = present.rounded(frame[HISTORY_COLUMNS], 3)
        sweeps = gr.update(choices=_sweep_choices(frame, ("sweep",)))  # compare cells of sweeps only
        return {self.table: show, self.pick: gr.update(choices=_sweep_choices(frame)), self.cmp_a: sweeps,
                self.cmp_b: sweeps}


@dataclass(frozen=True)
class RecommendView:
    budget: gr.Slider
    text: gr.Markdown
    settings: gr.State

    def show(self, df: pd.DataFrame | None, budget_mb, request=None) -> dict:
        reason, settings = recommend_for(df, budget_mb)
        return {self.text: localized(reason, request), self.settings: settings}



def recommended_or_latest(ctx: AppContext, results: pd.DataFrame | None, budget_mb: float | None = None,
                          request: gr.Request = None):
    """Apply: the recommendation for the sweep on the page under the memory budget set, else for the latest sweep
    in the history; when none fits, the recommendation's own reason (as "nothing fits in 512 MB")."""
    if results is None or len(results) == 0:
        frame = sweeps_frame(ctx.history_db)
        frame = frame[frame["kind"] == "sweep"] if not frame.empty else frame
        if frame.empty:
            raise present.error("No recommendation yet: run a sweep in the Benchmark tab first.", request)
        results = cells_frame(ctx.history_db, [int(frame["id"].iloc[0])])
    rec = recommend(results, float(budget_mb) if budget_mb else None)
    if rec.settings is None:
        raise present.error(rec.reason, request)
    return rec.settings
