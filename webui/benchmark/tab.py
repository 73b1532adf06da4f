"""Benchmark tab: a sweep builder over `python -m bench`'s axes, live results, history and a recommendation.

Handlers adapt UI values to chattts_lab.sweep.runner / store / report / recommend; nothing here measures. This module
lays the panels out and wires them; the builder's values and controls are webui/benchmark/sweep_form.py, running a sweep
is webui/benchmark/sweep_run.py, the history, reports and recommendation are webui/benchmark/sweep_history.py. Components are wired
by name: handlers take Gradio's dict inputs and return dicts keyed by component, so adding a control never shifts
another one's value.
"""

from __future__ import annotations

import inspect
import json
import uuid
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from chattts_lab.trackers import env as lab_env
from chattts_lab.history.frames import saved_prices
from chattts_lab.history.price import MachinePrice
from chattts_lab.history.report import environment_lines, results_frame
from chattts_lab.sweep.results import STATUSES
from chattts_lab.history import figures
from chattts_lab.serve import zerogpu
from webui.common import present
from webui.i18n.texts import localized, t
from chattts_lab.serve.context import AppContext
from webui.common.events import MODEL_QUEUE, LatestWins, bind, session_of
from chattts_lab.serve.runtime import devices
from webui.benchmark.quality_panel import build_quality_panel
from webui.benchmark.serving_tab import build_serving_tab, empty_figures
from webui.benchmark.sweep_form import (SweepControls, SweepForm, build_sweep_controls, cli_command, estimate, offered_precisions,
                              PRICE_FIELDS, price_from_form, quick_form, quick_label, spec_from_form)
from webui.benchmark.sweep_history import (COMPARE_METRICS, HISTORY_COLUMNS, HistoryView, RecommendView, compare_sweeps,
                                 download_reports, export_bundle_handler, import_bundle_handler, kept_results,
                                 load_sweeps, recommended_or_latest)
from webui.benchmark.sweep_run import SweepView, api_run_sweep, display_frame, stop_handler, sweep_updates, sweep_updates_for

# What app.py and the tests import from here.
__all__ = ["BenchmarkTab", "build_benchmark_tab", "cli_command", "quick_form", "recommended_or_latest",
           "spec_from_form", "sweep_updates"]


@dataclass
class BenchmarkTab:
    recommended: gr.State
    apply_best: gr.Button
    on_load: object  # fills the hardware panel and the history when a page opens
    load_outputs: set
    controls: SweepControls
    results: gr.State  # the sweep on the page (a DataFrame), for Apply
    budget: gr.Slider
    sweep_done: object  # the event that runs once a sweep has ended and the page shows it


def build_benchmark_tab(ctx: AppContext) -> BenchmarkTab:
    c = {}
    with gr.Tabs() as c["tabs"]:
        with gr.Tab(t("Sweep"), id="sweep"):
            _sweep_panel(c, quick_label(ctx))
            _results_panel(c)
            _recommend_panel(c)
            quality = build_quality_panel()
        with gr.Tab(t("Serving"), id="serving"):
            serving_plots = build_serving_tab(ctx)
        with gr.Tab(t("History"), id="history"):
            _history_panel(c)
            _compare_panel(c)
        with gr.Tab(t("Hardware"), id="hardware"):
            c["hw_md"] = gr.Markdown(elem_id="hw-summary")
            c["hw_json"] = gr.JSON(label=t("As recorded with every sweep"), elem_id="hw-json")
    view = SweepView(c["progress"], c["status"], c["gain"], c["table"], gr.State(None), gr.State(None),
                     {name: c[f"fig_{name}"] for name in ("latency", "rtf", "pareto", "memory", "roofline")},
                     c["filter_note"])
    history = HistoryView(c["history_table"], c["pick"], c["cmp_a"], c["cmp_b"])
    rec = RecommendView(c["budget"], c["recommendation"], gr.State(None))
    quality.follow(view.results)
    sweep_done = _wire_sweep(ctx, c, view, history, rec)
    _wire_history(ctx, c, view, history, rec)
    _build_api(ctx)
    on_load = bind(page_loaded, ctx, c["hw_md"], c["hw_json"], history, c["quick"], view, serving_plots)
    return BenchmarkTab(rec.settings, c["apply_best"], on_load,
                        {c["hw_md"], c["hw_json"], c["quick"], *history.outputs(), *view.plots.values(),
                         *serving_plots},
                        c["controls"], view.results, rec.budget, sweep_done)


# Each panel builder adds its components to `c` by name.
# What each plot shows before there is a sweep (in English; a page's load draws them again in its language).
EMPTY_NOTE = "Run a sweep (or Show one from History): its ok rows are drawn here"
EMPTY = figures.all_figures(results_frame([]), EMPTY_NOTE)


def _sweep_panel(c: dict, quick: str) -> None:
    c["controls"] = build_sweep_controls(SweepForm())
    c["saved_price"] = gr.Dropdown([], value=None, label=t("Saved machine prices (fills the price fields)"),
                                   elem_id="sw-saved-price")
    c["estimate"] = gr.Markdown(elem_id="sw-estimate")
    with gr.Row():
        c["quick"] = gr.Button(quick, elem_id="sw-quick")  # its estimate follows the sweeps (page_loaded, _wire_sweep)
        c["run"] = gr.Button(t("Run sweep"), variant="primary", elem_id="sw-run")
        c["stop"] = gr.Button(t("Stop"), variant="stop", elem_id="sw-stop")
    c["progress"] = gr.HTML(elem_id="sw-progress")
    c["status"] = gr.Markdown(elem_id="sw-status")


def _results_panel(c: dict) -> None:
    with gr.Row():
        c["f_devices"] = gr.Dropdown(devices(), multiselect=True, label=t("Filter: device"), elem_id="f-devices")
        c["f_precisions"] = gr.Dropdown(offered_precisions(), multiselect=True, label=t("Filter: precision"),
                                        elem_id="f-precisions")
        c["f_status"] = gr.Dropdown(list(STATUSES), multiselect=True, label=t("Filter: status"), elem_id="f-status")
    c["table"] = gr.DataFrame(display_frame(results_frame([])), elem_id="sw-table", show_search="search",
                              label=t("Results: a row per cell once a sweep runs or History shows one (click a header "
                                      "to sort; failed cells keep their reason)"), interactive=False, max_height=420)
    c["gain"] = gr.Markdown(elem_id="sw-gain")
    c["filter_note"] = gr.Markdown(elem_id="sw-filter-note")
    with gr.Row():
        c["fig_latency"] = gr.Plot(EMPTY["latency"], label=t("Latency vs batch"), elem_id="fig-latency")
        c["fig_rtf"] = gr.Plot(EMPTY["rtf"], label=t("RTF by configuration and threads"), elem_id="fig-rtf")
    with gr.Row():
        c["fig_pareto"] = gr.Plot(EMPTY["pareto"], label=t("Throughput vs latency (Pareto front)"),
                                  elem_id="fig-pareto")
        c["fig_memory"] = gr.Plot(EMPTY["memory"], label=t("Peak memory"), elem_id="fig-memory")
    c["fig_roofline"] = gr.Plot(EMPTY["roofline"], label=t("Distance from the memory-bandwidth floor"),
                                elem_id="fig-roofline")
    with gr.Row():
        c["reports_btn"] = gr.Button(t("Download CSV / JSON / HTML"), elem_id="sw-reports")
        c["reports"] = gr.File(label=t("Reports (CSV, JSON, HTML)"), file_count="multiple", elem_id="sw-report-files")


def _recommend_panel(c: dict) -> None:
    with gr.Group():
        gr.Markdown(t("### Recommendation for this machine"))
        with gr.Row():
            c["budget"] = gr.Slider(256, 65536, value=8192, step=256, label=t("Memory budget (MB of peak RSS)"),
                                    elem_id="budget")
            c["recommend"] = gr.Button(t("Recommend"), elem_id="recommend")
        c["recommendation"] = gr.Markdown(elem_id="recommendation")
        c["apply_best"] = gr.Button(t("Apply to the Synthesis tab"), variant="primary", elem_id="apply-best")


def _history_panel(c: dict) -> None:
    with gr.Row():
        c["refresh"] = gr.Button(t("Refresh"), elem_id="h-refresh")
    c["history_table"] = gr.DataFrame(pd.DataFrame(columns=HISTORY_COLUMNS), label=t("Past sweeps and serving runs"),
                                      interactive=False, elem_id="h-table", max_height=300)
    with gr.Row():
        c["pick"] = gr.Dropdown([], multiselect=True, label=t("Sweeps"), elem_id="h-pick")
        c["load"] = gr.Button(t("Show in the Sweep tab"), elem_id="h-load")
        c["export"] = gr.Button(t("Export bundle"), elem_id="h-export")
    with gr.Row():
        c["bundle_out"] = gr.File(label=t("Bundle (download)"), elem_id="h-bundle-out", height=100)
        c["bundle_in"] = gr.File(label=t("Import a bundle"), file_types=[".json"], elem_id="h-bundle-in", height=100)
    kept = kept_results()  # real runs on other machines (an H200's CUDA sweep...), to compare this machine with
    with gr.Row(visible=bool(kept)):
        c["kept"] = gr.Dropdown(kept, value=kept[0][1] if kept else None, elem_id="h-kept",
                                label=t("Kept results shipped with the app (docs/results)"))
        c["kept_import"] = gr.Button(t("Import the kept result"), elem_id="h-kept-import")


def _compare_panel(c: dict) -> None:
    gr.Markdown(t("### Compare two sweeps (or two machines)"))
    with gr.Row():
        c["cmp_a"] = gr.Dropdown([], label=t("Sweep A"), elem_id="cmp-a")
        c["cmp_b"] = gr.Dropdown([], label=t("Sweep B"), elem_id="cmp-b")
        c["cmp_metric"] = gr.Dropdown(COMPARE_METRICS, value="latency_p50_s", label=t("Metric"), elem_id="cmp-metric")
        c["cmp_run"] = gr.Button(t("Compare"), elem_id="cmp-run")
    c["cmp_envs"] = gr.Markdown(elem_id="cmp-envs")
    c["cmp_table"] = gr.DataFrame(pd.DataFrame(columns=["configuration", "sweep A", "sweep B"]), interactive=False,
                                  elem_id="cmp-table",
                                  label=t("Side by side: the metric for each configuration ok in both, once you Compare"))
    c["cmp_fig"] = gr.Plot(label=t("Comparison"), elem_id="cmp-fig")


# Handlers that need the tab's components (bound with `bind`).


# The form's estimate is filled by its own changes and by the refreshes after a run or the quick preset, all
# unqueued; the one sent last is the one shown. So are the filters' table and plots.
FORM_ESTIMATES, FILTERS = LatestWins(), LatestWins()


def estimate_changed(ctx: AppContext, controls: SweepControls, values: dict, request: gr.Request = None):
    ticket = FORM_ESTIMATES.arrived(request)
    return FORM_ESTIMATES.shown(request, ticket, estimate(ctx, controls.form(values), request))


def estimates_refreshed(ctx: AppContext, controls: SweepControls, quick: gr.Button, estimate_md: gr.Markdown,
                        values: dict, request: gr.Request = None) -> dict:
    ticket = FORM_ESTIMATES.arrived(request)
    return {quick: localized(quick_label(ctx), request),
            estimate_md: FORM_ESTIMATES.shown(request, ticket, estimate(ctx, controls.form(values), request))}


def filters_changed(view: SweepView, df, devs, precs, statuses, request: gr.Request = None) -> dict:
    ticket = FILTERS.arrived(request)
    return FILTERS.shown(request, ticket, view.filtered(df, devs, precs, statuses, request))


def run_clicked(ctx: AppContext, controls: SweepControls, view: SweepView, values: dict, request: gr.Request):
    """Run sweep: a mistake in the form is a warning, and the sweep on screen stays (an error would cover it)."""
    try:
        form = controls.form(values)
        spec, price = spec_from_form(ctx.policy.model, form, ctx.history_db), price_from_form(form)
        updates = sweep_updates_for(ctx, spec, session_of(request) or uuid.uuid4().hex, price)
    except zerogpu.OverGpuLimit as exc:
        present.warn(str(exc), request)
        return
    except gr.Error as exc:
        present.warn(exc.message, request)
        return
    for update in updates:
        yield view.show(update, request)


def price_choices(ctx: AppContext) -> list[tuple[str, str]]:
    """The prices the history keeps, as picker entries (the value is the price itself, as JSON)."""
    return [(f"${p.usd_per_hour:g} per hour · {p.source}", json.dumps(p.as_note()))
            for p in saved_prices(ctx.history_db)]


def saved_price_picked(controls: SweepControls, value) -> dict:
    """A saved price fills the form's price and its source."""
    if not value:
        return gr.skip()
    price = MachinePrice.from_note(json.loads(value))
    return {controls.by_name["price_usd_per_hour"]: price.usd_per_hour, controls.by_name["price_source"]: price.source}


def quick_clicked(controls: SweepControls, status: gr.Markdown, request: gr.Request = None) -> dict:
    """The preset only fills the form in (a person may change it first); the status line says what starts it."""
    shown = controls.show(quick_form())
    for name in PRICE_FIELDS:  # the machine's price stays as typed
        shown.pop(controls.by_name[name])
    return {**shown, status: localized(QUICK_NOTE, request)}


QUICK_NOTE = ("**Quick sweep filled in** (stock against lab, fp32, int8 and int4, batch 1, short clips): the estimate is "
              "below the settings; press **Run sweep** to start it.")


def show_clicked(ctx: AppContext, view: SweepView, tabs: gr.Tabs, sweep_ids, request: gr.Request = None) -> dict:
    """History's "Show in the Sweep tab": the sweeps picked, in the Sweep tab, switched to."""
    return {**view.show(load_sweeps(ctx, sweep_ids), request), tabs: gr.Tabs(selected="sweep")}


def recommend_clicked(view: SweepView, rec: RecommendView, values: dict, request: gr.Request = None):
    return rec.show(values[view.results], values[rec.budget], request)


def page_loaded(ctx: AppContext, hw_md: gr.Markdown, hw_json: gr.JSON, history: HistoryView, quick: gr.Button,
                view: SweepView, serving_plots: tuple, request: gr.Request = None):
    """The hardware panel (this machine, as a sweep would record it), the sweep history, the quick preset's
    estimate from it, and the empty plots in the page's language."""
    env = lab_env.capture_environment()
    return {hw_md: "\n".join(f"- {localized(line, request)}" for line in environment_lines(env)), hw_json: env,
            **history.refresh(ctx), quick: localized(quick_label(ctx), request),
            **view.plots_for(results_frame([]), EMPTY_NOTE, request), **dict(zip(serving_plots, empty_figures(request)))}


def _wire_sweep(ctx: AppContext, c: dict, view: SweepView, history: HistoryView, rec: RecommendView):
    """The Sweep tab's events; returns the one that runs once a sweep has ended and the page shows it."""
    private = dict(api_visibility="private")
    controls = c["controls"]
    for control in controls.inputs():
        control.change(bind(estimate_changed, ctx, controls), controls.inputs(), c["estimate"], queue=False,
                       **private)
    # Unqueued, as the form's own estimate is: from the queue, the form's values taken when a (refused) run ended
    # could land after the person typed new ones, and show the old values' estimate under the new ones. Unqueued
    # requests still run side by side, so FORM_ESTIMATES shows the one sent last.
    refresh_estimates = dict(fn=bind(estimates_refreshed, ctx, controls, c["quick"], c["estimate"]),
                             inputs=controls.inputs(), outputs={c["quick"], c["estimate"]}, queue=False, **private)
    # The button's figure and the form's come from one reading of the history (sweeps may have ended since the load).
    c["quick"].click(bind(quick_clicked, controls, c["status"]), None, controls.inputs() | {c["status"]}, queue=False,
                     **private).then(**refresh_estimates)
    c["saved_price"].focus(lambda: gr.update(choices=price_choices(ctx)), None, c["saved_price"], queue=False,
                           **private)
    c["saved_price"].input(bind(saved_price_picked, controls), c["saved_price"],
                           {controls.by_name[name] for name in PRICE_FIELDS}, queue=False, **private)
    sweep_run = c["run"].click(bind(run_clicked, ctx, controls, view), controls.inputs(), view.outputs(),
                               concurrency_id=MODEL_QUEUE, concurrency_limit=1, show_progress="minimal", **private)
    # A finished (or stopped) sweep is in the history at once: no page reload before History, compare or
    # the recommendation can see it.
    recommended = dict(fn=bind(recommend_clicked, view, rec), inputs={view.results, rec.budget},
                       outputs={rec.text, rec.settings}, **private)
    done = sweep_run.then(bind(history.refresh, ctx), None, history.outputs(), **private).then(**recommended)
    # The estimates (the quick preset's button, the one under the form) now count this sweep's cells too.
    sweep_run.then(**refresh_estimates)
    c["stop"].click(stop_handler, None, None, queue=False, **private)
    filters = [view.results, c["f_devices"], c["f_precisions"], c["f_status"]]
    for f in filters[1:]:
        f.change(bind(filters_changed, view), filters, {view.table, view.filter_note, *view.plots.values()},
                 queue=False, **private)
    c["reports_btn"].click(present.warns(bind(download_reports, ctx)), [view.results, view.sweep_id], c["reports"],
                           **private)
    c["recommend"].click(**recommended)
    return done


def _wire_history(ctx: AppContext, c: dict, view: SweepView, history: HistoryView, rec: RecommendView) -> None:
    private = dict(api_visibility="private")
    refreshed = dict(fn=bind(history.refresh, ctx), inputs=None, outputs=history.outputs(), **private)
    c["refresh"].click(**refreshed)
    # Show: the sweeps in the Sweep tab (switched to), with their recommendation. A mistake in any of these handlers
    # is a warning, and what their outputs show stays (present.warns).
    c["load"].click(present.warns(bind(show_clicked, ctx, view, c["tabs"])), c["pick"], view.outputs() | {c["tabs"]},
                    **private).then(bind(recommend_clicked, view, rec), {view.results, rec.budget},
                                    {rec.text, rec.settings}, **private)
    c["export"].click(present.warns(bind(export_bundle_handler, ctx)), c["pick"], c["bundle_out"], **private)
    c["bundle_in"].upload(bind(import_bundle_handler, ctx), c["bundle_in"], c["bundle_in"], **private).then(**refreshed)
    c["kept_import"].click(bind(import_bundle_handler, ctx), c["kept"], None, **private).then(**refreshed)

    def compare_clicked(a, b, metric, request: gr.Request = None):
        cmp_df, fig, envs = compare_sweeps(ctx, a, b, metric, request)
        return {c["cmp_table"]: cmp_df, c["cmp_fig"]: fig, c["cmp_envs"]: envs}

    c["cmp_run"].click(present.warns(compare_clicked), [c["cmp_a"], c["cmp_b"], c["cmp_metric"]],
                       {c["cmp_table"], c["cmp_fig"], c["cmp_envs"]}, **private)


def _api_input(param: inspect.Parameter):
    """A hidden component for one `/run_sweep` parameter, typed and defaulted from the signature."""
    if isinstance(param.default, bool):
        return gr.Checkbox(param.default, label=param.name)
    if isinstance(param.default, (int, float)):
        return gr.Number(param.default, precision=0 if isinstance(param.default, int) else None, label=param.name)
    return gr.Textbox(param.default, label=param.name)


def _build_api(ctx: AppContext) -> None:
    """Hidden components behind the stable `/run_sweep` API name, derived from api_run_sweep's parameters."""
    params = list(inspect.signature(api_run_sweep).parameters.values())[1:]  # after the app context
    with gr.Group(visible=False):
        inputs = [_api_input(p) for p in params]
        out = gr.DataFrame(label="results")
        trigger = gr.Button("run_sweep")
    trigger.click(bind(api_run_sweep, ctx), inputs, out, api_name="run_sweep", concurrency_id=MODEL_QUEUE,
                  concurrency_limit=1)
