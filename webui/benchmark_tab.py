"""Benchmark tab: a sweep builder over `python -m bench`'s axes, live results, history and a recommendation.

Handlers adapt UI values to chattts_lab.sweep / store / report / recommend; nothing here measures.
"""

from __future__ import annotations

import html
import json
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from chattts_lab import env as lab_env
from chattts_lab import plots
from chattts_lab.env import usable_cores
from chattts_lab.grid import bool_list, describe, estimate_grid, int_list, refuse_huge_grid
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.precision import PRECISIONS
from chattts_lab.recommend import recommend
from chattts_lab.report import TABLE_COLUMNS, results_frame, write_reports
from chattts_lab.spec import SpecError, SweepSpec
from chattts_lab.store import BundleError, Store, cells_frame, compare_frame, export_bundle, import_bundle, sweeps_frame
from chattts_lab.sweep import CellFinished, CellStarted, FidelityStarted, SweepFinished, SweepStarted, run_sweep
from webui import figures
from webui.context import MODEL_QUEUE, AppContext, bind
from webui.runtime import devices, precisions_for

STATUS_CHOICES = ["ok", "skipped", "unsupported", "oom", "error", "crashed", "timeout", "cancelled"]  # reliability: +timeout
COMPARE_METRICS = ["latency_p50_s", "rtf", "audio_s_per_s", "step_ms", "peak_rss_mb", "ttfa_s"]


@dataclass(frozen=True)
class SweepForm:
    devices: list
    precisions: list
    batches: str
    threads: str
    tokens: str
    repeats: float
    streams: list
    warmup: float
    min_time_s: float
    fidelity: bool


def quick_preset() -> tuple:
    """A sweep that ends within a few minutes on 2 cores: fp32 vs int8 (where it runs), batch 1 and 4, 32 tokens."""
    precisions = [p for p in ("fp32", "int8") if p in precisions_for("cpu", "stock")]
    return ["cpu"], precisions, "1,4", str(usable_cores()), "32", 2, ["off"], 1, 0.0, False


def spec_from_form(ctx: AppContext, form: SweepForm) -> SweepSpec:
    """UI values -> a validated SweepSpec (same list and range syntax as `python -m bench`)."""
    try:
        spec = SweepSpec(
            model=ctx.model, devices=tuple(form.devices or ()), precisions=tuple(form.precisions or ()),
            batches=int_list(form.batches), threads=int_list(form.threads), tokens=int_list(form.tokens),
            streams=bool_list(",".join(form.streams)) if form.streams else (),
            warmup=int(form.warmup), repeats=int(form.repeats), max_repeats=max(100, int(form.repeats)),
            min_time_s=float(form.min_time_s), fidelity=bool(form.fidelity),
        )
        refuse_huge_grid(spec, ctx.history_db)  # too large to finish: refused with the estimate
        return spec
    except (SpecError, TypeError, ValueError) as exc:
        raise gr.Error(f"Sweep settings: {exc}") from exc


def estimate(ctx: AppContext, *values) -> str:
    try:
        spec = spec_from_form(ctx, SweepForm(*values))
    except gr.Error as exc:
        return f"⚠️ {exc.message}"
    return estimate_grid(spec, ctx.history_db).summary()


# ----------------------------------------------------------------------------------------------
# Running a sweep


@dataclass
class StopFlags:
    """Per-session stop requests for running sweeps (the Stop button sets one; the sweep polls it)."""

    _flags: dict

    def start(self, session: str) -> threading.Event:
        self._flags[session] = flag = threading.Event()
        return flag

    def stop(self, session: str) -> bool:
        flag = self._flags.get(session)
        if flag is None:
            return False
        flag.set()
        return True

    def done(self, session: str) -> None:
        self._flags.pop(session, None)


STOPS = StopFlags({})


def progress_html(done: int, total: int, text: str) -> str:
    pct = 100 * done / total if total else 0
    return (f'<div class="sweep-progress" data-done="{done}" data-total="{total}">'
            f'<progress max="{max(total, 1)}" value="{done}" style="width:100%"></progress>'
            f"<div>{html.escape(text)} ({pct:.0f} %)</div></div>")


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """What the table shows: the report's columns, numbers rounded, failed cells kept with their reason."""
    cols = ["sweep_id"] * ("sweep_id" in df) + [c for c in TABLE_COLUMNS if c in df]
    out = df[cols].copy()
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].round(4)
    return out


def _outputs(df: pd.DataFrame, progress: str, status: str, sweep_id):
    return (progress, display_frame(df), df, *figures.all_figures(df), status, sweep_id)


def sweep_handler(ctx: AppContext, request: gr.Request, *values):
    """Run a sweep; yields (progress, table, results state, 4 figures, status, sweep id) after every cell."""
    spec = spec_from_form(ctx, SweepForm(*values))
    session = request.session_hash if request else uuid.uuid4().hex
    flag = STOPS.start(session)
    results, total, sweep_id = [], len(spec.expand()), None
    try:
        with ctx.model_work:  # nothing else touches the CPU's model work while cells are timed
            for event in run_sweep(spec, ctx.history_db, should_stop=flag.is_set):
                if isinstance(event, SweepStarted):
                    sweep_id = event.sweep_id
                    yield _outputs(results_frame(results), progress_html(0, total, "starting"),
                                   f"Sweep {sweep_id} running: {total} cell(s).", sweep_id)
                elif isinstance(event, CellStarted):
                    eta = f", about {describe(event.eta_s)} left" if event.eta_s else ""
                    yield (progress_html(len(results), total, f"measuring {event.config.label}{eta}"),
                           *[gr.skip()] * 7, gr.skip())
                elif isinstance(event, CellFinished):
                    results.append(event.result)
                    df = results_frame(results)
                    yield _outputs(df, progress_html(len(results), total, f"{event.result.config.label}: "
                                                     f"{event.result.status}"), gr.skip(), sweep_id)
                elif isinstance(event, FidelityStarted):
                    yield (progress_html(len(results), total, f"fidelity check: {event.precision} on {event.device} "
                                         f"vs fp32"), *[gr.skip()] * 7, gr.skip())
                elif isinstance(event, SweepFinished):
                    df = results_frame(event.results)
                    note = {"finished": "finished", "cancelled": "stopped: every finished row is kept",
                            "interrupted": "interrupted"}.get(event.status, event.status)
                    yield _outputs(df, progress_html(len(event.results), total, note),
                                   f"Sweep {sweep_id} {note}.", sweep_id)
    finally:
        STOPS.done(session)


def stop_handler(request: gr.Request = None):
    if not STOPS.stop(request.session_hash if request else ""):
        gr.Info("No sweep of yours is running.")
    else:
        gr.Info("Stopping: the running cell is ended and every finished row is kept.")


def filter_table(df: pd.DataFrame | None, devs, precs, statuses):
    if df is None or len(df) == 0:
        return gr.skip()
    keep = df["device"].isin(devs or df["device"].unique()) & df["precision"].isin(precs or df["precision"].unique())
    keep &= df["status"].isin(statuses or df["status"].unique())
    return display_frame(df[keep])


def api_run_sweep(ctx: AppContext, devices_csv: str, precisions_csv: str, batches: str, threads: str, tokens: str,
                  repeats: float, stream: bool):
    """The `/run_sweep` API: comma lists as in `python -m bench`; returns the results table when done."""
    form = SweepForm([d.strip() for d in devices_csv.split(",") if d.strip()],
                     [p.strip() for p in precisions_csv.split(",") if p.strip()], batches, threads, tokens,
                     repeats, ["on"] if stream else ["off"], 0, 0.0, False)
    df = pd.DataFrame()
    for out in sweep_handler(ctx, None, *form.__dict__.values()):
        if not isinstance(out[2], type(gr.skip())):
            df = out[2]
    return display_frame(df)


# ----------------------------------------------------------------------------------------------
# History, comparison, files


def _sweep_choices(ctx: AppContext) -> list[tuple[str, int]]:
    frame = sweeps_frame(ctx.history_db)
    return [(f"#{r.id} {r.created_at[:19]} {r.status} · {r.machine or '?'} · {r.n_ok}/{r.n_cells} ok", int(r.id))
            for r in frame.itertuples()]


def refresh_history(ctx: AppContext):
    frame = sweeps_frame(ctx.history_db)
    choices = _sweep_choices(ctx)
    show = frame[["id", "created_at", "status", "origin", "machine", "model", "n_cells", "n_ok"]]
    return show, gr.update(choices=choices), gr.update(choices=choices), gr.update(choices=choices)


def load_sweeps(ctx: AppContext, sweep_ids):
    """Show stored sweeps in the results table and plots."""
    if not sweep_ids:
        raise gr.Error("Pick one or more sweeps from the history first.")
    df = cells_frame(ctx.history_db, [int(i) for i in sweep_ids])
    return display_frame(df), df, *figures.all_figures(df), f"Showing sweep(s) {', '.join(map(str, sweep_ids))}."


def compare_sweeps(ctx: AppContext, a, b, metric: str):
    if a is None or b is None or a == b:
        raise gr.Error("Pick two different sweeps to compare.")
    ids = [int(a), int(b)]
    table = compare_frame(ctx.history_db, ids, metric)
    fig = plots.compare_machines(cells_frame(ctx.history_db, ids), metric)
    envs = []
    with Store(ctx.history_db) as store:
        for sid in ids:
            sweep = store.sweep(sid)
            envs.append(f"- **#{sid}**: {lab_env.summary(sweep['environment'])}" if sweep else f"- #{sid}: missing")
    return table, fig, "\n".join(envs)


def import_bundle_handler(ctx: AppContext, file):
    if not file:
        return gr.skip()
    try:
        new, skipped = import_bundle(ctx.history_db, file)
    except BundleError as exc:
        gr.Warning(f"Could not import that bundle: {exc}", duration=None)
        return None
    gr.Info(f"Imported sweep(s) {', '.join(map(str, new)) or 'none'}; {len(skipped)} already present.")
    return None


def export_bundle_handler(ctx: AppContext, sweep_ids):
    if not sweep_ids:
        raise gr.Error("Pick the sweeps to export from the history first.")
    out = ctx.files_dir / f"bundle-{uuid.uuid4().hex[:8]}" / "chattts-lab-bundle.json"
    return str(export_bundle(ctx.history_db, out, [int(i) for i in sweep_ids]))


def download_reports(ctx: AppContext, df: pd.DataFrame | None, sweep_id):
    if df is None or len(df) == 0:
        raise gr.Error("Run or load a sweep first.")
    env, fidelity, meta = {}, [], None
    ids = sorted(set(df["sweep_id"])) if "sweep_id" in df else [sweep_id] if sweep_id else []
    if len(ids) == 1:
        with Store(ctx.history_db) as store:
            sweep = store.sweep(int(ids[0]))
            fidelity = store.fidelity(int(ids[0]))
        if sweep:
            env, meta = sweep["environment"], {k: sweep[k] for k in ("id", "uuid", "created_at", "status", "spec")}
    frame = df.drop(columns=[c for c in ("sweep_id", "machine", "created_at") if c in df])
    paths = write_reports(frame, env, fidelity, ctx.files_dir / f"report-{uuid.uuid4().hex[:8]}", ("csv", "json", "html"), meta)
    return [str(p) for p in paths.values()]


def recommend_handler(df: pd.DataFrame | None, budget_mb: float):
    rec = recommend(df if df is not None else pd.DataFrame(), float(budget_mb) if budget_mb else None)
    return rec.reason, rec.settings


def page_load(ctx: AppContext):
    """Hardware panel (this machine, as a sweep would record it) and the sweep history."""
    from chattts_lab.report import environment_lines

    env = lab_env.capture_environment()
    return ("\n".join(f"- {line}" for line in environment_lines(env)), env, *refresh_history(ctx))


# ----------------------------------------------------------------------------------------------
# Builder


@dataclass
class BenchmarkTab:
    recommended: gr.State
    apply_best: gr.Button
    on_load: object  # fills the hardware panel and the history when a page opens
    load_outputs: list


def build_benchmark_tab(ctx: AppContext) -> BenchmarkTab:
    results_state = gr.State(None)
    sweep_id = gr.State(None)
    recommended = gr.State(None)
    with gr.Tabs():
        with gr.Tab("Sweep", id="sweep"):
            with gr.Row():
                sweep_devices = gr.CheckboxGroup(devices(), value=["cpu"], label="Devices (present here)", elem_id="sw-devices")
                sweep_precisions = gr.CheckboxGroup(list(PRECISIONS), value=["fp32"], label="Precisions", elem_id="sw-precisions")
                sweep_streams = gr.CheckboxGroup(["off", "on"], value=["off"], label="Stream", elem_id="sw-streams")
            with gr.Row():
                sweep_batches = gr.Textbox("1,4", label="Batch sizes", info="1,4,8 or 1-8*2", elem_id="sw-batches")
                sweep_threads = gr.Textbox(str(usable_cores()), label="Threads", info="1,2 or 1-4", elem_id="sw-threads")
                sweep_tokens = gr.Textbox("128", label="Audio tokens", info=f"{STEPS_PER_AUDIO_SECOND:.3g} per second of audio", elem_id="sw-tokens")
            with gr.Row():
                sweep_repeats = gr.Number(3, precision=0, minimum=1, label="Repeats", elem_id="sw-repeats")
                sweep_warmup = gr.Number(1, precision=0, minimum=0, label="Warm-up calls", elem_id="sw-warmup")
                sweep_min_time = gr.Number(1.0, minimum=0, label="Min seconds per cell", elem_id="sw-min-time")
                sweep_fidelity = gr.Checkbox(True, label="Fidelity check (drift from fp32)", elem_id="sw-fidelity")
            estimate_md = gr.Markdown(elem_id="sw-estimate")
            with gr.Row():
                quick_btn = gr.Button("Quick sweep preset (a few minutes)", elem_id="sw-quick")
                run_btn = gr.Button("Run sweep", variant="primary", elem_id="sw-run")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="sw-stop")
            progress = gr.HTML(elem_id="sw-progress")
            status = gr.Markdown(elem_id="sw-status")
            with gr.Row():
                f_devices = gr.Dropdown(devices(), multiselect=True, label="Filter: device", elem_id="f-devices")
                f_precisions = gr.Dropdown(list(PRECISIONS), multiselect=True, label="Filter: precision", elem_id="f-precisions")
                f_status = gr.Dropdown(STATUS_CHOICES, multiselect=True, label="Filter: status", elem_id="f-status")
            table = gr.DataFrame(label="Results (click a header to sort; failed cells keep their reason)",
                                 interactive=False, elem_id="sw-table", show_search="search", max_height=420)
            with gr.Row():
                fig_latency = gr.Plot(label="Latency vs batch", elem_id="fig-latency")
                fig_rtf = gr.Plot(label="RTF by precision and threads", elem_id="fig-rtf")
            with gr.Row():
                fig_pareto = gr.Plot(label="Throughput vs latency (Pareto front)", elem_id="fig-pareto")
                fig_memory = gr.Plot(label="Peak memory", elem_id="fig-memory")
            with gr.Row():
                reports_btn = gr.Button("Download CSV / JSON / HTML", elem_id="sw-reports")
                reports = gr.File(label="Reports", file_count="multiple", elem_id="sw-report-files", height=100)
            with gr.Group():
                gr.Markdown("### Recommendation for this machine")
                with gr.Row():
                    budget = gr.Slider(256, 65536, value=8192, step=256, label="Memory budget (MB of peak RSS)",
                                       elem_id="budget")
                    recommend_btn = gr.Button("Recommend", elem_id="recommend")
                recommendation = gr.Markdown(elem_id="recommendation")
                apply_best = gr.Button("Apply to the Synthesis tab", variant="primary", elem_id="apply-best")
        with gr.Tab("History", id="history"):
            with gr.Row():
                refresh_btn = gr.Button("Refresh", elem_id="h-refresh")
            history = gr.DataFrame(label="Past sweeps", interactive=False, elem_id="h-table", max_height=300)
            with gr.Row():
                pick = gr.Dropdown([], multiselect=True, label="Sweeps", elem_id="h-pick")
                load_btn = gr.Button("Show in the Sweep tab", elem_id="h-load")
                export_btn = gr.Button("Export bundle", elem_id="h-export")
            with gr.Row():
                bundle_out = gr.File(label="Bundle (download)", elem_id="h-bundle-out", height=100)
                bundle_in = gr.File(label="Import a bundle", file_types=[".json"], elem_id="h-bundle-in", height=100)
            gr.Markdown("### Compare two sweeps (or two machines)")
            with gr.Row():
                cmp_a = gr.Dropdown([], label="Sweep A", elem_id="cmp-a")
                cmp_b = gr.Dropdown([], label="Sweep B", elem_id="cmp-b")
                cmp_metric = gr.Dropdown(COMPARE_METRICS, value="latency_p50_s", label="Metric", elem_id="cmp-metric")
                cmp_btn = gr.Button("Compare", elem_id="cmp-run")
            cmp_envs = gr.Markdown(elem_id="cmp-envs")
            cmp_table = gr.DataFrame(label="Side by side", interactive=False, elem_id="cmp-table")
            cmp_fig = gr.Plot(label="Comparison", elem_id="cmp-fig")
        with gr.Tab("Hardware", id="hardware"):
            hw_md = gr.Markdown(elem_id="hw-summary")
            hw_json = gr.JSON(label="As recorded with every sweep", elem_id="hw-json")

    form = [sweep_devices, sweep_precisions, sweep_batches, sweep_threads, sweep_tokens, sweep_repeats, sweep_streams,
            sweep_warmup, sweep_min_time, sweep_fidelity]
    figs = [fig_latency, fig_rtf, fig_pareto, fig_memory]
    for control in form:
        control.change(bind(estimate, ctx), form, estimate_md, queue=False, api_visibility="private")
    quick_btn.click(quick_preset, None, form, queue=False, api_visibility="private")
    run_btn.click(bind(sweep_handler, ctx), form, [progress, table, results_state, *figs, status, sweep_id],
                  concurrency_id=MODEL_QUEUE, concurrency_limit=1, show_progress="minimal", api_visibility="private")
    stop_btn.click(stop_handler, None, None, queue=False, api_visibility="private")
    for f in (f_devices, f_precisions, f_status):
        f.change(filter_table, [results_state, f_devices, f_precisions, f_status], table, queue=False,
                 api_visibility="private")
    reports_btn.click(bind(download_reports, ctx), [results_state, sweep_id], reports, api_visibility="private")
    recommend_btn.click(recommend_handler, [results_state, budget], [recommendation, recommended], api_visibility="private")
    history_outputs = [history, pick, cmp_a, cmp_b]
    refresh_btn.click(bind(refresh_history, ctx), None, history_outputs, api_visibility="private")
    load_btn.click(bind(load_sweeps, ctx), pick, [table, results_state, *figs, status], api_visibility="private")
    export_btn.click(bind(export_bundle_handler, ctx), pick, bundle_out, api_visibility="private")
    bundle_in.upload(bind(import_bundle_handler, ctx), bundle_in, bundle_in, api_visibility="private").then(
        bind(refresh_history, ctx), None, history_outputs, api_visibility="private")
    cmp_btn.click(bind(compare_sweeps, ctx), [cmp_a, cmp_b, cmp_metric], [cmp_table, cmp_fig, cmp_envs],
                  api_visibility="private")
    _build_api(ctx)
    return BenchmarkTab(recommended, apply_best, bind(page_load, ctx), [hw_md, hw_json, *history_outputs])


def _build_api(ctx: AppContext) -> None:
    """Hidden components behind the stable `/run_sweep` API name."""
    with gr.Group(visible=False):
        inputs = [gr.Textbox("cpu", label="devices"), gr.Textbox("fp32", label="precisions"),
                  gr.Textbox("1", label="batches"), gr.Textbox(str(usable_cores()), label="threads"),
                  gr.Textbox("32", label="tokens"), gr.Number(1, precision=0, label="repeats"),
                  gr.Checkbox(False, label="stream")]
        out = gr.DataFrame(label="results")
        trigger = gr.Button("run_sweep")
    trigger.click(bind(api_run_sweep, ctx), inputs, out, api_name="run_sweep", concurrency_id=MODEL_QUEUE,
                  concurrency_limit=1)


def recommended_or_latest(ctx: AppContext, recommended, budget_mb: float | None = None):
    """The recommendation already made on this page, else one from the latest sweep in the history."""
    if recommended:
        return recommended
    frame = sweeps_frame(ctx.history_db)
    if frame.empty:
        raise gr.Error("No recommendation yet: run a sweep in the Benchmark tab first.")
    rec = recommend(cells_frame(ctx.history_db, [int(frame["id"].iloc[0])]), budget_mb)
    if rec.settings is None:
        raise gr.Error(rec.reason)
    return rec.settings
