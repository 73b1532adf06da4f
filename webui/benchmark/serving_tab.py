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
from chattts_lab.history.price import MachinePrice
from chattts_lab.history.store import save_price
from bench.serving.capacity import (CapacityFound, capacity_cost, capacity_frame, capacity_gain, capacity_sentence,
                                          run_capacity)
from bench.serving.loadtest import (LevelFinished, LevelStarted, ServeFinished, ServeSpec, ServeStarted,
                                          run_serving)
from bench.serving.summaries import batching_gain, serving_frame
from chattts_lab.options import as_text, spec_argv
from chattts_lab.sweep.spec import SpecError
from webui.common import present
from chattts_lab.said import Said
from webui.i18n.texts import localized, t, translator
from chattts_lab.serve.context import AppContext
from webui.common.events import MODEL_QUEUE, StopFlags, bind, session_of
from chattts_lab.engines import PRECISIONS
from chattts_lab.requests import SCHEDULINGS
from chattts_lab.serve.runtime import engines_for, precisions_for

TABLE = ["sweep_id", "machine", "max_batch", "users", "rate", "ok", "errors", "lost", "audio_s_per_s", "queue_p90_s",
         "ttfb_p90_s", "ttfa_p50_s", "ttfa_p90_s", "latency_p50_s", "latency_p90_s", "batch_sizes", "config"]
APP_DEFAULT = "the app's default"
STOPS = StopFlags({})
INTRO = ("Many users at once against this app's `/v1/audio/speech`: continuous batching (a request joins the running "
         "generation at the next step) and request-level batching (batches of up to N requests; max batch 1: one "
         "request at a time). Each scheduling and batch limit starts its own copy of the app on this machine; the "
         "numbers are what its clients saw. **Find capacity** answers how many real-time listeners this machine "
         "holds under a service level.")


# streams held beside the floor (the streams this machine makes with every row started together) and their ratio
CAPACITY_TABLE = ["sweep_id", "machine", "batching", "max_batch", "streams", "floor_streams", "floor_pct",
                  "usd_per_audio_hour", "broke_at",
                  "broken_because", "tokens", "slo_ttfa_p99_s", "slo_continuity_pct", "config", "usd_per_hour",
                  "price_source"]


def serving_spec(ctx: AppContext, users: str, max_batch: str, requests: int, tokens: int, stream: bool,
                 engine: str, precision: str, batching: list[str] | None = None, capacity: bool = False,
                 slo_ttfa_p99_s: float | None = None,
                 slo_continuity_pct: float | None = None, max_users: int | None = None, min_streams: int | None = None,
                 confirm_s: float | None = None) -> ServeSpec:
    """The spec `python -m bench serve` builds from the same choices, by its builder; a bad choice is a gr.Error.
    With `capacity`, the users box is not used: the search raises the users itself (as --capacity does)."""
    choices = dict(model=ctx.policy.model, users=None if capacity else users, max_batches=max_batch,
                   requests_per_user=requests, tokens=tokens, stream=bool(stream),
                   engine=None if engine == APP_DEFAULT else engine,
                   precision=None if precision == APP_DEFAULT else precision,
                   batching=None if batching is None else tuple(batching), capacity=bool(capacity),
                   slo_ttfa_p99_s=slo_ttfa_p99_s, slo_continuity_pct=slo_continuity_pct, max_users=max_users,
                   min_streams=min_streams, confirm_s=confirm_s)
    try:
        return ServeSpec.from_choices({k: v for k, v in choices.items() if v is not None or k == "users"})
    except (SpecError, ValueError, TypeError) as exc:
        raise gr.Error(str(exc)) from None


def cli_command(ctx: AppContext, spec: ServeSpec) -> str:
    return "python -m bench serve " + shlex.join([*spec_argv(spec), "--db", str(ctx.history_db)])


def run_clicked(ctx: AppContext, users, max_batch, requests, tokens, stream, engine, precision, batching, capacity,
                slo_ttfa, slo_continuity, max_users, min_streams, confirm_s, price_usd_per_hour, price_source,
                request: gr.Request):
    """Yields (status, table, latency figure, throughput figure, capacity figure) as each load level finishes. A
    mistake, or an app that would not start, is a warning and a status line: the run on screen stays (an error
    would cover it)."""
    try:
        spec = serving_spec(ctx, users, max_batch, requests, tokens, stream, engine, precision, batching, capacity,
                            slo_ttfa, slo_continuity, max_users, min_streams, confirm_s)
        price = MachinePrice.given(price_usd_per_hour, price_source)
    except ValueError as exc:
        present.warn(f"Machine price: {exc}", request)
        return
    except gr.Error as exc:
        present.warn(exc.message, request)
        return
    session = session_of(request) or uuid.uuid4().hex
    flag = STOPS.start(session)
    run = _Run(spec, Said("Starting: `{command}`", command=cli_command(ctx, spec)), price)
    yield run.view(request)
    try:
        with ctx.model_work:  # this app's model stays idle while the measured apps run
            for event in (run_capacity if spec.capacity else run_serving)(spec, ctx.history_db, flag.is_set):
                if isinstance(event, ServeStarted):
                    save_price(ctx.history_db, event.sweep_id, price)
                run.saw(event)
                yield run.view(request)
    except RuntimeError as exc:  # an app that would not start or serve: its log tail says why
        run.status = Said("The serving run stopped: {why}", why=str(exc))
        present.warn(run.status, request)
        yield run.view(request)
    finally:
        STOPS.done(session)


class _Run:
    """What the panel shows of the run in progress, updated by each of its events."""

    def __init__(self, spec: ServeSpec, status: str, price: MachinePrice | None = None):
        self.spec, self.status, self.run_id, self.price = spec, status, None, price
        self.levels: list[dict] = []
        self.found: list[dict] = []  # a capacity search: one answer per scheduling

    def saw(self, event) -> None:
        if isinstance(event, ServeStarted):
            self.run_id = event.sweep_id
            self.status = (Said("Capacity run {run}: raising the users until the service level breaks (an app "
                                "starts per scheduling).", run=event.sweep_id) if self.spec.capacity else
                           Said("Serving run {run}: {levels} load levels (an app starts per batch limit).",
                                run=event.sweep_id, levels=event.levels))
        elif isinstance(event, LevelStarted):
            self.status = Said("Level {level}: {load}, max batch {size}…", level=event.index + 1, load=_load(event.level),
                               size=event.level["max_batch"])
        elif isinstance(event, LevelFinished):
            self.levels.append(event.summary)
        elif isinstance(event, CapacityFound):
            self.found.append(event.result)
        elif isinstance(event, ServeFinished):
            ended = Said("Capacity run {run} {status}." if self.spec.capacity else "Serving run {run} {status}.",
                         run=event.sweep_id, status=event.status)
            self.status = Said.joined([ended, *self._findings(event.summaries)])

    def _findings(self, summaries: list[dict]) -> list[str]:
        if not self.spec.capacity:
            return [g for u in self.spec.users if (g := batching_gain(summaries, u))]
        gain = capacity_gain(self.found)
        costs = [cost.capitalized() for r in self.found if (cost := capacity_cost(r, self.price))]
        return [capacity_sentence(r).capitalized() for r in self.found] + costs + ([gain.capitalized()] if gain else [])

    def view(self, request=None):
        """What the panel shows, the status and plots in the language of `request`'s browser."""
        return _view(localized(self.status, request), self.levels, self.run_id, request) + (
            plots.capacity_curve(self.found, translator(request)),)


def _load(level: dict) -> Said:
    if level.get("users"):
        return Said("{n} {user}", n=level["users"], user="user" if level["users"] == 1 else "users")
    return Said("{rate:g} requests/s", rate=level["rate"])


def _view(status: str, levels: list[dict], run_id: int | None, request=None):
    frame = pd.DataFrame(levels)
    if not frame.empty:  # the run in progress: its levels so far, under the run's own number
        frame.insert(0, "sweep_id", run_id)
        frame.insert(1, "machine", "this machine")
    return status, _table(frame), *_figures(frame, request)


def _figures(levels: pd.DataFrame, request=None) -> tuple:
    """The two serving plots (each says so when it has no level to draw), in the language of `request`'s browser."""
    say = translator(request)
    return plots.serving_latency(levels, say), plots.serving_throughput(levels, say)


def empty_figures(request=None) -> tuple:
    """The three plots before a run, in the language of `request`'s browser (the page is built once for all)."""
    return *_figures(pd.DataFrame(), request), plots.capacity_curve([], translator(request))


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


def show_runs(ctx: AppContext, sweep_ids, request: gr.Request = None):
    """Past serving runs (from any machine imported into the history) side by side, with the capacity found."""
    picked = [int(s) for s in sweep_ids or []]
    levels = serving_frame(ctx.history_db, picked)
    return _table(levels), *_figures(levels, request), capacity_table(ctx, picked)


def capacity_table(ctx: AppContext, sweep_ids: list[int] | None = None) -> pd.DataFrame:
    """Every capacity answer in the history (or the picked runs'): one row per run and scheduling, any machine."""
    found = capacity_frame(ctx.history_db)
    if sweep_ids and not found.empty:
        found = found[found["sweep_id"].isin(sweep_ids)]
    return present.rounded(found.reindex(columns=CAPACITY_TABLE)) if not found.empty else pd.DataFrame(
        columns=CAPACITY_TABLE)


def build_serving_tab(ctx: AppContext) -> tuple:
    """The panel; returns its three plots (latency, throughput, capacity), which a page's load fills in its language
    (empty_figures)."""
    gr.Markdown(t(INTRO))
    engine_choices = [(t(APP_DEFAULT), APP_DEFAULT), *engines_for("cpu")]
    shown = ServeSpec()  # the panel's defaults are the spec's
    with gr.Row():
        users = gr.Textbox(as_text(shown.users), label=t("Concurrent users (list or range)"), elem_id="sv-users")
        max_batch = gr.Textbox(as_text(shown.max_batches), label=t("Max batch (one app each; 1 = one at a time)"),
                               elem_id="sv-max-batch")
        requests = gr.Number(shown.requests_per_user, precision=0, label=t("Requests per user"), elem_id="sv-requests")
        tokens = gr.Number(shown.tokens, precision=0, label=t("Audio tokens per request"), elem_id="sv-tokens")
    with gr.Row():
        stream = gr.Checkbox(shown.stream, label=t("Stream (measures time to first audio)"), elem_id="sv-stream")
        engine = gr.Dropdown(engine_choices, value=APP_DEFAULT, label=t("Engine"), elem_id="sv-engine")
        precision = gr.Dropdown([(t(APP_DEFAULT), APP_DEFAULT), *precisions_here()], value=APP_DEFAULT, label=t("Precision"),
                                elem_id="sv-precision")
        batching = gr.CheckboxGroup([(t(name), name) for name in SCHEDULINGS], value=list(shown.batching), elem_id="sv-batching",
                                    label=t("Scheduling (continuous: one app; request-level: one app per max batch)"))
    capacity_inputs = _capacity_controls(shown)
    with gr.Row():
        price = gr.Number(None, minimum=0, label=t("Machine price ($ per hour)"), elem_id="sv-price",
                          info=t("optional: a capacity then says what an audio hour costs (price / streams held)"))
        source = gr.Textbox(label=t("Where the price comes from"), elem_id="sv-price-source",
                            placeholder=t("e.g. AWS c7a.large on-demand, us-east-1, 2026-12"))
    with gr.Row():
        run = gr.Button(t("Run serving benchmark"), variant="primary", elem_id="sv-run")
        stop = gr.Button(t("Stop"), variant="stop", elem_id="sv-stop")
    status = gr.Markdown(elem_id="sv-status")
    table = gr.DataFrame(_table(pd.DataFrame()), label=t("Load levels: a row per level once a run starts (or Show "
                         "picks runs from the history)"), interactive=False, elem_id="sv-table")
    empty_latency, empty_throughput, empty_capacity = empty_figures()  # in English; a page's load redraws them
    with gr.Row():
        fig_latency = gr.Plot(empty_latency, label=t("Latency vs users"), elem_id="sv-fig-latency")
        fig_throughput = gr.Plot(empty_throughput, label=t("Throughput vs users"), elem_id="sv-fig-throughput")
    fig_capacity = gr.Plot(empty_capacity, label=t("Capacity search"), elem_id="sv-fig-capacity")
    pick, show, found = _history_controls(ctx)

    private = dict(api_visibility="private")
    inputs = [users, max_batch, requests, tokens, stream, engine, precision, batching, *capacity_inputs, price, source]
    outputs = [status, table, fig_latency, fig_throughput, fig_capacity]
    ran = run.click(bind(run_clicked, ctx), inputs, outputs, concurrency_id=MODEL_QUEUE, concurrency_limit=1,
                    **private)
    refresh = dict(fn=lambda: gr.update(choices=runs_choices(ctx)), inputs=None, outputs=pick, **private)
    ran.then(**refresh).then(lambda: capacity_table(ctx), None, found, **private)
    stop.click(_stop, None, None, **private)
    show.click(bind(show_runs, ctx), pick, [table, fig_latency, fig_throughput, found], **private)
    pick.focus(**refresh)
    return fig_latency, fig_throughput, fig_capacity


def _history_controls(ctx: AppContext) -> tuple:
    """The serving runs in the history: a picker, Show, and every capacity answer."""
    gr.Markdown(t("### Serving runs in the history"))
    with gr.Row():
        pick = gr.Dropdown([], multiselect=True, label=t("Runs"), elem_id="sv-pick")
        show = gr.Button(t("Show"), elem_id="sv-show")
    found = gr.DataFrame(capacity_table(ctx), label=t("Real-time streams held (capacity runs, every machine in the "
                         "history; Show narrows to the picked runs)"), interactive=False, elem_id="sv-capacity-table")
    return pick, show, found


def precisions_here() -> list[str]:
    """Every precision some engine runs on this CPU (a pick the chosen engine cannot run is refused with the reason)."""
    runs = {p for e in engines_for("cpu") for p in precisions_for("cpu", e)}
    return [p for p in PRECISIONS if p in runs]


def _capacity_controls(shown: ServeSpec) -> list:
    """The capacity search's switch, service level and how much it measures (`--capacity`, `--slo-ttfa-p99`,
    `--slo-continuity`, `--max-users`, `--min-streams`, `--confirm`), with the spec's defaults."""
    with gr.Row():
        capacity = gr.Checkbox(shown.capacity, label=t("Find capacity: raise the users until the service level breaks "
                               "(the users box is not used)"), elem_id="sv-capacity")
        slo_ttfa = gr.Number(shown.slo_ttfa_p99_s, label=t("Service level: p99 first audio at most (s)"),
                             elem_id="sv-slo-ttfa")
        slo_continuity = gr.Number(shown.slo_continuity_pct, label=t("…and streams with no stall over 100 ms at "
                                   "least (%)"), elem_id="sv-slo-continuity")
        max_users = gr.Number(shown.max_users, precision=0, label=t("Most users tried"), elem_id="sv-max-users")
        min_streams = gr.Number(shown.min_streams, precision=0, label=t("Streams measured per level, at least"),
                                elem_id="sv-min-streams")
        confirm = gr.Number(shown.confirm_s, label=t("Confirm: seconds of Poisson arrivals near the capacity found "
                            "(0: none)"), elem_id="sv-confirm")
    return [capacity, slo_ttfa, slo_continuity, max_users, min_streams, confirm]


def _stop(request: gr.Request = None):
    if STOPS.stop(session_of(request)):
        present.info("Stopping after the current load level: every finished level is kept.", request)
    else:
        present.info("No serving run of yours is running.", request)
