"""The Benchmark tab's Serving panel: the serving benchmark (`python -m bench serve`) from the browser, and every
serving run in the history, compared on one plot.

The runs start their own apps (one per batch limit) on this machine, as the command line does; this app's own
model stays idle meanwhile (the run holds the model lock, as a sweep does), so it does not spoil the timings.
"""

from __future__ import annotations

import shlex
import uuid

import gradio as gr
import pandas as pd

from chattts_lab.history import plots
from chattts_lab.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted,
                                          run_serving)
from chattts_lab.serving.summaries import batching_gain, serving_frame
from chattts_lab.sweep.options import as_text, spec_argv
from chattts_lab.sweep.spec import SpecError
from webui import present
from webui.context import MODEL_QUEUE, AppContext, StopFlags, bind
from webui.runtime import engines_for, plural, precisions_for

TABLE = ["sweep_id", "machine", "max_batch", "users", "rate", "ok", "errors", "lost", "audio_s_per_s", "queue_p90_s",
         "ttfb_p90_s", "ttfa_p50_s", "ttfa_p90_s", "latency_p50_s", "latency_p90_s", "batch_sizes", "config"]
APP_DEFAULT = "the app's default"
STOPS = StopFlags({})


def serving_spec(ctx: AppContext, users: str, max_batch: str, requests: int, tokens: int, stream: bool,
                 engine: str, precision: str) -> ServeSpec:
    """The spec `python -m bench serve` builds from the same choices, by its builder; a bad choice is a gr.Error."""
    try:
        return ServeSpec.from_choices(dict(model=ctx.model, users=users, max_batches=max_batch,
                                           requests_per_user=requests, tokens=tokens, stream=bool(stream),
                                           engine=None if engine == APP_DEFAULT else engine,
                                           precision=None if precision == APP_DEFAULT else precision))
    except (SpecError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from None


def cli_command(ctx: AppContext, spec: ServeSpec) -> str:
    return "python -m bench serve " + shlex.join([*spec_argv(spec), "--db", str(ctx.history_db)])


def run_clicked(ctx: AppContext, users, max_batch, requests, tokens, stream, engine, precision, request: gr.Request):
    """Yields (status, table, latency figure, throughput figure) as each load level finishes."""
    spec = serving_spec(ctx, users, max_batch, requests, tokens, stream, engine, precision)
    session = request.session_hash if request else uuid.uuid4().hex
    flag = STOPS.start(session)
    levels, status, run_id = [], f"Starting: `{cli_command(ctx, spec)}`", None
    yield _view(status, levels, run_id)
    try:
        with ctx.model_work:  # this app's model stays idle while the measured apps run
            for event in run_serving(spec, ctx.history_db, should_stop=flag.is_set):
                if isinstance(event, ServeStarted):
                    run_id = event.sweep_id
                    status = f"Serving run {event.sweep_id}: {event.levels} load levels (an app starts per batch limit)."
                elif isinstance(event, LevelStarted):
                    status = f"Level {event.index + 1}: {_load(event.level)}, max batch {event.level['max_batch']}…"
                elif isinstance(event, LevelFinished):
                    levels.append(event.summary)
                elif isinstance(event, ServeFinished):
                    gains = [g for u in spec.users if (g := batching_gain(event.summaries, u))]
                    status = " ".join([f"Serving run {event.sweep_id} {event.status}.", *gains])
                yield _view(status, levels, run_id)
    except RuntimeError as exc:  # an app that would not start or serve: its log tail says why
        raise gr.Error(str(exc)) from None
    finally:
        STOPS.done(session)


def _load(level: dict) -> str:
    return plural(level["users"], "user") if level.get("users") else f"{level['rate']:g} requests/s"


def _view(status: str, levels: list[dict], run_id: int | None):
    frame = pd.DataFrame(levels)
    if not frame.empty:  # the run in progress: its levels so far, under the run's own number
        frame.insert(0, "sweep_id", run_id)
        frame.insert(1, "machine", "this machine")
    return status, _table(frame), *_figures(frame)


def _figures(levels: pd.DataFrame) -> tuple:
    """The two serving plots (each says so when it has no level to draw)."""
    return plots.serving_latency(levels), plots.serving_throughput(levels)


def _table(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame(columns=TABLE)
    # A closed-loop run (users) has no arrival rate, an open-loop one no users: show only what was measured.
    shown = frame.reindex(columns=TABLE).dropna(axis=1, how="all")
    if "batch_sizes" in shown:
        shown["batch_sizes"] = shown["batch_sizes"].map(lambda sizes: ", ".join(f"{k}: {v}" for k, v in sizes.items())
                                                        if isinstance(sizes, dict) else sizes)
    return present.rounded(shown)


def runs_choices(ctx: AppContext) -> list[tuple[str, int]]:
    levels = serving_frame(ctx.history_db)
    if levels.empty:
        return []
    runs = levels.groupby("sweep_id")["machine"].first()
    return [(f"#{sid} · {machine}", int(sid)) for sid, machine in runs.sort_index(ascending=False).items()]


def show_runs(ctx: AppContext, sweep_ids):
    """Past serving runs (from any machine imported into the history) side by side."""
    levels = serving_frame(ctx.history_db, [int(s) for s in sweep_ids or []])
    return _table(levels), *_figures(levels)


def build_serving_tab(ctx: AppContext) -> None:
    gr.Markdown("Many users at once against this app's `/v1/audio/speech`, with dynamic batching (batches of up "
                "to N requests) and without (max batch 1: one request at a time). Each batch limit starts its own "
                "copy of the app on this machine; the numbers are what its clients saw.")
    engine_choices = [APP_DEFAULT, *engines_for("cpu")]
    shown = ServeSpec()  # the panel's defaults are the spec's
    with gr.Row():
        users = gr.Textbox(as_text(shown.users), label="Concurrent users (list or range)", elem_id="sv-users")
        max_batch = gr.Textbox(as_text(shown.max_batches), label="Max batch (one app each; 1 = one at a time)",
                               elem_id="sv-max-batch")
        requests = gr.Number(shown.requests_per_user, precision=0, label="Requests per user", elem_id="sv-requests")
        tokens = gr.Number(shown.tokens, precision=0, label="Audio tokens per request", elem_id="sv-tokens")
    with gr.Row():
        stream = gr.Checkbox(shown.stream, label="Stream (measures time to first audio)", elem_id="sv-stream")
        engine = gr.Dropdown(engine_choices, value=APP_DEFAULT, label="Engine", elem_id="sv-engine")
        precision = gr.Dropdown([APP_DEFAULT, *precisions_for("cpu", "lab")], value=APP_DEFAULT, label="Precision",
                                elem_id="sv-precision")
        run = gr.Button("Run serving benchmark", variant="primary", elem_id="sv-run")
        stop = gr.Button("Stop", variant="stop", elem_id="sv-stop")
    status = gr.Markdown(elem_id="sv-status")
    table = gr.DataFrame(_table(pd.DataFrame()), label="Load levels: a row per level once a run starts (or Show "
                         "picks runs from the history)", interactive=False, elem_id="sv-table")
    with gr.Row():
        empty_latency, empty_throughput = _figures(pd.DataFrame())
        fig_latency = gr.Plot(empty_latency, label="Latency vs users", elem_id="sv-fig-latency")
        fig_throughput = gr.Plot(empty_throughput, label="Throughput vs users", elem_id="sv-fig-throughput")
    gr.Markdown("### Serving runs in the history")
    with gr.Row():
        pick = gr.Dropdown([], multiselect=True, label="Runs", elem_id="sv-pick")
        show = gr.Button("Show", elem_id="sv-show")

    private = dict(api_visibility="private")
    inputs = [users, max_batch, requests, tokens, stream, engine, precision]
    outputs = [status, table, fig_latency, fig_throughput]
    ran = run.click(bind(run_clicked, ctx), inputs, outputs, concurrency_id=MODEL_QUEUE, concurrency_limit=1,
                    **private)
    refresh = dict(fn=lambda: gr.update(choices=runs_choices(ctx)), inputs=None, outputs=pick, **private)
    ran.then(**refresh)
    stop.click(_stop, None, None, **private)
    show.click(bind(show_runs, ctx), pick, [table, fig_latency, fig_throughput], **private)
    pick.focus(**refresh)


def _stop(request: gr.Request = None):
    if STOPS.stop(request.session_hash if request else ""):
        gr.Info("Stopping after the current load level: every finished level is kept.")
    else:
        gr.Info("No serving run of yours is running.")
