"""Benchmark tab: a sweep builder over `python -m bench`'s axes, live results, history and a recommendation.

Handlers adapt UI values to chattts_lab.sweep / store / report / recommend; nothing here measures.
Components are wired by name: the sweep builder's values are a `SweepForm` whose fields name the
components (`SweepControls`), handlers take Gradio's dict inputs and return dicts keyed by component,
so adding a control never shifts another one's value.
"""

from __future__ import annotations

import html
import inspect
import shlex
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Iterator, Sequence

import gradio as gr
import pandas as pd

from chattts_lab import env as lab_env
from chattts_lab import plots
from chattts_lab.compare import compare_sweeps as compare_ratios
from chattts_lab.compare import sweep_comparison
from chattts_lab.devices import parse_device
from chattts_lab.env import usable_cores
from chattts_lab.grid import bool_list, describe, estimate_grid, int_list, refuse_huge_grid, str_list
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.precision import ENGINES, PRECISIONS, extra_precisions, unsupported_reason
from chattts_lab.recommend import recommend
from chattts_lab.report import environment_lines, results_frame, shown_columns, write_reports
from chattts_lab.results import STATUSES, CellResult
from chattts_lab.spec import SpecError, SweepSpec
from chattts_lab.store import BundleError, Store, cells_frame, compare_frame, export_bundle, import_bundle, sweeps_frame
from chattts_lab.sweep import (CellFinished, CellStarted, FidelityStarted, PassStarted, QualityStarted, SweepFinished,
                               SweepPlanned, SweepStarted, run_sweep)
from webui import figures
from webui.context import MODEL_QUEUE, AppContext, StopFlags, bind
from webui.runtime import devices
from webui.quality_panel import build_quality_panel
from webui.serving_tab import build_serving_tab

COMPARE_METRICS = ["latency_p50_s", "rtf", "audio_s_per_s", "step_ms", "peak_rss_mb", "ttfa_s"]
ON_OFF = ("off", "on")
ENGINE_NOTES = {"stock": "ChatTTS's own Chat.infer, untouched (the reference)",
                "lab": "this project's decode loop over the same weights (README: the lab engine)",
                "onnx": "the lab's decode loop with the GPT exported to ONNX Runtime (README: the onnx engine)"}


# ----------------------------------------------------------------------------------------------
# The sweep builder's values


@dataclass(frozen=True)
class SweepForm:
    """The sweep builder's values by name. Defaults are `python -m bench`'s, so an untouched form runs what
    `python -m bench` with no grid arguments runs."""

    devices: Sequence[str] = ("cpu",)
    engines: Sequence[str] = ("stock",)
    precisions: Sequence[str] = ("fp32",)
    compiles: Sequence[str] = ("off",)
    streams: Sequence[str] = ("off",)
    batches: str = "1"
    threads: str = field(default_factory=lambda: str(usable_cores()))  # empty also means every usable core
    tokens: str = "128"
    repeats: int = 3
    warmup: int = 1
    min_time_s: float = 1.0
    max_repeats: int = 100
    timeout_s: float = 1800.0
    memory_budget_mb: float | None = None
    fidelity: bool = True
    fidelity_tokens: int = 32
    quality: bool = False  # audio quality beside stock fp32 (chattts_lab.quality.sweep): minutes more
    passes: int = SweepSpec.passes  # interleaved passes; 1 runs each cell in its own process, back to back
    drift_threshold_pct: float = SweepSpec.drift_threshold_pct
    cluster: str = ""  # blank: this machine; ray or ray:HOST:PORT: a fleet sweep on that Ray cluster
    nodes: str = ""  # Ray resource labels of the machines to measure every cell on (comma list)


def quick_form() -> SweepForm:
    """The newcomer's question (how much faster is the lab engine here?) in about two minutes on 2 cores:
    stock against lab at the precisions a CPU runs well (fp32, int8), batch 1, short clips, no fidelity pass."""
    engines = [e for e in ("stock", "lab") if e in runnable_engines()]
    precisions = [p for p in ("fp32", "int8") if any(p in runnable_precisions("cpu", e) for e in engines)]
    return SweepForm(devices=("cpu",), engines=tuple(engines), precisions=tuple(precisions), batches="1",
                     tokens="32", repeats=2, warmup=1, min_time_s=0.0, fidelity=False)


def _number(value, name: str, kind=float):
    if value is None or value == "":
        raise SpecError(f"{name} needs a number")
    return kind(value)


def spec_from_form(model: str, form: SweepForm, history_db=None) -> SweepSpec:
    """UI values -> a validated SweepSpec, built as `bench.cli.spec_from_args` builds it from the same choices
    (same list and range syntax; tests/test_sweep_spec_parity.py holds the two equal)."""
    try:
        spec = SweepSpec(
            model=model, devices=tuple(form.devices or ()), engines=tuple(form.engines or ()),
            precisions=tuple(form.precisions or ()),
            compiles=bool_list(",".join(form.compiles)) if form.compiles else (),
            streams=bool_list(",".join(form.streams)) if form.streams else (),
            batches=int_list(form.batches),
            threads=int_list(form.threads) if str(form.threads or "").strip() else (usable_cores(),),
            tokens=int_list(form.tokens), warmup=_number(form.warmup, "warm-up calls", int),
            repeats=_number(form.repeats, "repeats", int), min_time_s=_number(form.min_time_s, "min seconds per cell"),
            max_repeats=max(_number(form.max_repeats, "max repeats", int), _number(form.repeats, "repeats", int)),
            timeout_s=_number(form.timeout_s, "timeout per cell"), fidelity=bool(form.fidelity),
            fidelity_tokens=_number(form.fidelity_tokens, "fidelity tokens", int), quality=bool(form.quality),
            memory_budget_mb=None if form.memory_budget_mb in (None, "") else float(form.memory_budget_mb),
            passes=_number(form.passes, "passes", int),
            drift_threshold_pct=_number(form.drift_threshold_pct, "drift threshold"),
            cluster=str(form.cluster or "").strip() or None, nodes=str_list(form.nodes) if _given(form.nodes) else (),
        )
        refuse_huge_grid(spec.validate(), history_db)  # too large to finish: refused with the estimate
        return spec
    except (SpecError, TypeError, ValueError) as exc:
        raise gr.Error(f"Sweep settings: {exc}") from exc


def _given(text) -> bool:
    """A text box with something in it."""
    return bool(str(text or "").strip())


def cli_command(model: str, db: str, form: SweepForm) -> str:
    """The `python -m bench` command line that runs the same sweep into the same history."""
    args = ["--model", model, "--db", str(db), "--device", ",".join(form.devices), "--engine", ",".join(form.engines),
            "--precision", ",".join(form.precisions), "--compile", ",".join(form.compiles),
            "--stream", ",".join(form.streams), "--batch", str(form.batches)]
    args += ["--threads", str(form.threads)] if str(form.threads or "").strip() else []
    args += ["--tokens", str(form.tokens), "--repeats", str(int(form.repeats)), "--warmup", str(int(form.warmup)),
             "--min-time", f"{float(form.min_time_s):g}", "--max-repeats", str(int(form.max_repeats)),
             "--timeout", f"{float(form.timeout_s):g}", "--fidelity", "on" if form.fidelity else "off",
             "--fidelity-tokens", str(int(form.fidelity_tokens)), "--passes", str(int(form.passes)),
             "--drift-threshold", f"{float(form.drift_threshold_pct):g}"]
    if form.memory_budget_mb not in (None, ""):
        args += ["--memory-budget-mb", f"{float(form.memory_budget_mb):g}"]
    args += ["--quality"] if form.quality else []
    args += ["--cluster", str(form.cluster).strip()] if _given(form.cluster) else []
    args += ["--nodes", str(form.nodes).strip()] if _given(form.nodes) else []
    return "python -m bench " + shlex.join(args)


def estimate(ctx: AppContext, form: SweepForm) -> str:
    try:
        spec = spec_from_form(ctx.model, form, ctx.history_db)
    except gr.Error as exc:
        return f"⚠️ {exc.message}"
    return (f"{estimate_grid(spec, ctx.history_db).summary()}. The same sweep from a terminal:\n\n`{cli_command(ctx.model, ctx.history_db, form)}`")


# ----------------------------------------------------------------------------------------------
# What can run here


def all_precisions() -> tuple[str, ...]:
    return PRECISIONS + tuple(p for e in ENGINES for p in extra_precisions(e) if p not in PRECISIONS)


def runnable_precisions(device: str, engine: str) -> list[str]:
    dev = parse_device(device)
    return [p for p in all_precisions() if unsupported_reason(engine, dev, p) is None]


def runnable_engines() -> list[str]:
    return [e for e in ENGINES if any(runnable_precisions(d, e) for d in devices())]


def offered_precisions() -> list[str]:
    return [p for p in all_precisions() if any(p in runnable_precisions(d, e) for d in devices() for e in ENGINES)]


def has_cuda() -> bool:
    return any(d.startswith("cuda") for d in devices())


def axes_note() -> str:
    """What runs on this machine, per device and engine, and why the rest is not offered."""
    lines = []
    for device in devices():
        runs = " · ".join(f"{e} {', '.join(runnable_precisions(device, e)) or 'nothing'}" for e in ENGINES)
        lines.append(f"- **{device}**: {runs}")
        lines += [f"  - {e} {p}: {unsupported_reason(e, parse_device(device), p)}" for e in ENGINES
                  for p in offered_precisions() if p not in runnable_precisions(device, e)]
    absent = [d for d in ("cuda", "mps") if not any(h.startswith(d) for h in devices())]
    if absent:
        lines.append(f"- Not offered: {', '.join(absent)} (not present on this machine).")
    if not has_cuda():
        lines.append("- torch.compile stays off: it is ignored off CUDA (stock ChatTTS silently ignores it; the lab "
                     "engine measured no gain on CPU and runs eager).")
    return ("**What runs here** (a combination outside this list becomes an `unsupported` row with its reason, "
            "as in `python -m bench`):\n" + "\n".join(lines))


# ----------------------------------------------------------------------------------------------
# Running a sweep


STOPS = StopFlags({})


@dataclass(frozen=True)
class SweepUpdate:
    """One step of a running sweep as the UI shows it; None leaves that part as it is."""

    progress: str | None = None
    results: pd.DataFrame | None = None
    status: str | None = None
    sweep_id: int | None = None
    cells: Sequence[CellResult] = ()  # the rows of `results`, in order, with their raw timed calls


@dataclass(frozen=True)
class Progress:
    """How far a sweep is. Interleaved cells end only with the last pass, so until then the bar counts the timed
    calls of the passes started (`calls` of `total_calls`); `done` counts cells with a row."""

    total: int  # cells in the sweep
    done: int = 0
    pass_no: int = 0  # 1-based number of the pass running; 0 before the first
    passes: int = 0
    calls: int = 0  # timed calls of the passes started so far
    total_calls: int = 0

    def html(self, text: str) -> str:
        value, top = (self.calls, self.total_calls) if self.total_calls and self.done < self.total else (
            self.done, self.total)
        pct = 100 * value / top if top else 0
        return (f'<div class="sweep-progress" data-done="{self.done}" data-total="{self.total}" '
                f'data-pass="{self.pass_no}" data-passes="{self.passes}" data-calls="{self.calls}" '
                f'data-total-calls="{self.total_calls}">'
                f'<progress max="{max(top, 1)}" value="{value}" style="width:100%"></progress>'
                f"<div>{html.escape(text)} ({pct:.0f} %)</div></div>")


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """What the table shows: the report's columns, numbers rounded, failed cells kept with their reason."""
    cols = ["sweep_id"] * ("sweep_id" in df) + [c for c in shown_columns(df) if c in df]
    out = df[cols].copy()
    for c in out.columns:
        if out[c].dtype.kind == "f":
            out[c] = out[c].round(4)
    return out


FINISH_NOTES = {"finished": "finished", "cancelled": "stopped: every finished row is kept", "interrupted": "interrupted"}


def sweep_updates(ctx: AppContext, spec: SweepSpec, session: str) -> Iterator[SweepUpdate]:
    """Run a sweep, describing its progress after every event; the Stop button of `session` ends it."""
    flag = STOPS.start(session)
    results, sweep_id, plan = [], None, ""
    progress = Progress(total=len(spec.expand()))
    try:
        with ctx.model_work:  # nothing else touches the CPU's model work while cells are timed
            for event in run_sweep(spec, ctx.history_db, should_stop=flag.is_set):
                if isinstance(event, SweepStarted):
                    sweep_id = event.sweep_id
                    yield SweepUpdate(progress.html("starting"), results_frame(results),
                                      f"Sweep {sweep_id} running: {progress.total} cell(s).", sweep_id, results)
                elif isinstance(event, CellStarted):
                    # once per cell: when its process starts (interleaved cells then wait for their passes)
                    eta = f", about {describe(event.eta_s)} left" if event.eta_s else ""
                    yield SweepUpdate(progress.html(f"measuring {event.config.label}{eta}"))
                elif isinstance(event, SweepPlanned):
                    plan = event.plan
                    yield SweepUpdate(progress.html("workers loaded"), status=f"Sweep {sweep_id} running. {plan}")
                elif isinstance(event, PassStarted):
                    calls = progress.calls if progress.pass_no else 0
                    progress = replace(progress, pass_no=event.pass_no + 1, passes=event.passes,
                                       calls=calls + len(event.order),
                                       total_calls=calls + len(event.order) * (event.passes - event.pass_no))
                    yield SweepUpdate(progress.html(f"pass {event.pass_no + 1} of {event.passes}: one timed call "
                                                    f"of each of {len(event.order)} cell(s)"))
                elif isinstance(event, CellFinished):
                    results.append(event.result)
                    progress = replace(progress, done=len(results))
                    label = f"{event.result.config.label}: {event.result.status}"
                    yield SweepUpdate(progress.html(label), results_frame(results), cells=list(results))
                elif isinstance(event, FidelityStarted):
                    yield SweepUpdate(progress.html(f"fidelity check: {event.precision} on {event.device} vs fp32"))
                elif isinstance(event, QualityStarted):
                    yield SweepUpdate(progress.html(f"quality beside stock fp32: {event.what}"))
                elif isinstance(event, SweepFinished):
                    note = FINISH_NOTES.get(event.status, event.status)
                    progress = replace(progress, done=len(event.results))
                    drift = (event.drift or {}).get("sentence", "")
                    yield SweepUpdate(progress.html(note), results_frame(event.results),
                                      " ".join(filter(None, [f"Sweep {sweep_id} {note}.", drift, plan])), sweep_id,
                                      event.results)
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


def _csv(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in str(text).split(",") if t.strip())


def api_run_sweep(ctx: AppContext, devices: str = "cpu", precisions: str = "fp32", batches: str = "1",
                  threads: str = "", tokens: str = "32", repeats: int = 1, stream: bool = False,
                  engines: str = "stock", compile: bool = False, warmup: int = 0, min_time_s: float = 0.0,
                  fidelity: bool = False, passes: int = SweepSpec.passes):
    """The `/run_sweep` API: comma lists as in `python -m bench` (empty threads: every usable core); returns the
    results table when done. The first seven parameters keep the README's order; later ones have defaults."""
    form = replace(SweepForm(), devices=_csv(devices), precisions=_csv(precisions), batches=batches, threads=threads,
                   tokens=tokens, repeats=repeats, streams=(ON_OFF[bool(stream)],), engines=_csv(engines),
                   compiles=(ON_OFF[bool(compile)],), warmup=warmup, min_time_s=min_time_s, fidelity=fidelity,
                   passes=passes)
    final = pd.DataFrame()
    for update in sweep_updates(ctx, spec_from_form(ctx.model, form, ctx.history_db), uuid.uuid4().hex):
        if update.results is not None:
            final = update.results
    return display_frame(final)


# ----------------------------------------------------------------------------------------------
# History, comparison, files


def _sweep_choices(frame: pd.DataFrame) -> list[tuple[str, int]]:
    return [(f"#{r.id} {r.created_at[:19]} {r.status} · {r.machine or '?'} · {r.n_ok}/{r.n_cells} ok", int(r.id))
            for r in frame.itertuples()]


def load_sweeps(ctx: AppContext, sweep_ids) -> SweepUpdate:
    """Stored sweeps, to show in the results table and plots."""
    if not sweep_ids:
        raise gr.Error("Pick one or more sweeps from the history first.")
    ids = [int(i) for i in sweep_ids]
    df = cells_frame(ctx.history_db, ids)
    with Store(ctx.history_db) as store:  # the same rows in the same order as cells_frame, with their timed calls
        cells = [r for sid in ids if store.sweep(sid) for r in store.results(sid)]
    return SweepUpdate(results=df, status=f"Showing sweep(s) {', '.join(map(str, sweep_ids))}.", cells=cells)


def compare_sweeps(ctx: AppContext, a, b, metric: str):
    """(side-by-side table, figure, markdown naming each sweep's machine and giving each configuration's speed
    ratio, B against A, with its interval)."""
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
    ratios = compare_ratios(ctx.history_db, ids)  # from each configuration's raw timed calls, with an interval
    speeds = [f"- {r.configuration}: {r.phrase}" for r in ratios.itertuples()] or ["- no configuration ok in both"]
    return table, fig, "\n".join(envs + ["", f"**Speed, sweep #{ids[1]} against #{ids[0]}:**", *speeds])


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


# ----------------------------------------------------------------------------------------------
# Components, grouped by name


@dataclass(frozen=True)
class SweepControls:
    """The sweep builder's components, keyed by SweepForm field name."""

    by_name: dict

    def inputs(self) -> set:
        return set(self.by_name.values())

    def form(self, values: dict) -> SweepForm:
        """Gradio's dict of input values (keyed by component) -> the form."""
        return SweepForm(**{name: values[component] for name, component in self.by_name.items()})

    def show(self, form: SweepForm) -> dict:
        return {component: _ui_value(getattr(form, name)) for name, component in self.by_name.items()}


def _ui_value(value):
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class SweepView:
    """Where a sweep (running, or loaded from the history) is shown."""

    progress: gr.HTML
    status: gr.Markdown
    gain: gr.Markdown
    table: gr.DataFrame
    results: gr.State
    sweep_id: gr.State
    plots: dict  # figures.FIGURES name -> gr.Plot

    def outputs(self) -> set:
        return {self.progress, self.status, self.gain, self.table, self.results, self.sweep_id, *self.plots.values()}

    def show(self, update: SweepUpdate) -> dict:
        out = {}
        if update.progress is not None:
            out[self.progress] = update.progress
        if update.status is not None:
            out[self.status] = update.status
        if update.sweep_id is not None:
            out[self.sweep_id] = update.sweep_id
        if update.results is not None:
            df = update.results
            out |= {self.table: display_frame(df), self.results: df, self.gain: figures.gain_sentence(df, update.cells)}
            out |= {self.plots[name]: fig for name, fig in figures.all_figures(df).items()}
        return out


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
        choices = _sweep_choices(frame)
        show = frame[["id", "created_at", "kind", "status", "origin", "machine", "model", "n_cells", "n_ok", "drift_pct",
                      "noisy"]]
        return {self.table: show, **{dd: gr.update(choices=choices) for dd in (self.pick, self.cmp_a, self.cmp_b)}}


@dataclass(frozen=True)
class RecommendView:
    budget: gr.Slider
    text: gr.Markdown
    settings: gr.State

    def show(self, df: pd.DataFrame | None, budget_mb) -> dict:
        reason, settings = recommend_for(df, budget_mb)
        return {self.text: reason, self.settings: settings}


@dataclass
class BenchmarkTab:
    recommended: gr.State
    apply_best: gr.Button
    on_load: object  # fills the hardware panel and the history when a page opens
    load_outputs: set
    controls: SweepControls


# ----------------------------------------------------------------------------------------------
# Builders


def build_sweep_controls(form: SweepForm) -> SweepControls:
    """One component per SweepForm field, showing `form`; only what can run here is offered (axes_note says why)."""
    c = {}
    with gr.Row():
        c["devices"] = gr.CheckboxGroup(devices(), value=list(form.devices), label="Devices (present here)",
                                        elem_id="sw-devices")
        c["engines"] = gr.CheckboxGroup(runnable_engines(), value=list(form.engines), label="Engines",
                                        info="; ".join(f"{e}: {ENGINE_NOTES.get(e, '')}" for e in runnable_engines()),
                                        elem_id="sw-engines")
        c["precisions"] = gr.CheckboxGroup(offered_precisions(), value=list(form.precisions), label="Precisions",
                                           elem_id="sw-precisions")
    with gr.Row():
        c["compiles"] = gr.CheckboxGroup(
            list(ON_OFF), value=list(form.compiles), label="torch.compile", interactive=has_cuda(), elem_id="sw-compiles",
            info="CUDA only" if has_cuda() else "ignored off CUDA, so it stays off on this machine")
        c["streams"] = gr.CheckboxGroup(list(ON_OFF), value=list(form.streams), label="Stream",
                                        info="on also measures time to first audio", elem_id="sw-streams")
    with gr.Row():
        c["batches"] = gr.Textbox(form.batches, label="Batch sizes", info="1,4,8 or 1-8*2", elem_id="sw-batches")
        c["threads"] = gr.Textbox(form.threads, label="Threads", info="1,2 or 1-4; empty: every usable core",
                                  elem_id="sw-threads")
        c["tokens"] = gr.Textbox(form.tokens, label="Audio tokens", info=f"{STEPS_PER_AUDIO_SECOND:.3g} per second of audio", elem_id="sw-tokens")
    with gr.Row():
        c["repeats"] = gr.Number(form.repeats, precision=0, minimum=1, label="Repeats", elem_id="sw-repeats")
        c["passes"] = gr.Number(form.passes, precision=0, minimum=1, label="Interleaved passes",
                                info="each pass times every cell once, in a fresh random order (Repeats and Min "
                                     "seconds then do not apply); 1: each cell in its own process", elem_id="sw-passes")
        c["warmup"] = gr.Number(form.warmup, precision=0, minimum=0, label="Warm-up calls", elem_id="sw-warmup")
        c["min_time_s"] = gr.Number(form.min_time_s, minimum=0, label="Min seconds per cell", elem_id="sw-min-time")
        c["fidelity"] = gr.Checkbox(form.fidelity, label="Fidelity check (drift from fp32)", elem_id="sw-fidelity")
        c["quality"] = gr.Checkbox(form.quality, label="Quality beside stock fp32 (MOS, WER, voice; minutes more)",
                                   elem_id="sw-quality")
    with gr.Accordion("More measurement settings (as in python -m bench)", open=False):
        with gr.Row():
            c["max_repeats"] = gr.Number(form.max_repeats, precision=0, minimum=1, label="Max repeats per cell",
                                         elem_id="sw-max-repeats")
            c["timeout_s"] = gr.Number(form.timeout_s, minimum=1, label="Timeout per cell (s)", elem_id="sw-timeout")
            c["memory_budget_mb"] = gr.Number(form.memory_budget_mb, minimum=1, label="Memory budget per cell (MB)",
                                              info="empty: no limit; over it a cell is oom", elem_id="sw-memory-budget")
            c["fidelity_tokens"] = gr.Number(form.fidelity_tokens, precision=0, minimum=2, label="Fidelity tokens",
                                             elem_id="sw-fidelity-tokens")
        with gr.Row():
            c["drift_threshold_pct"] = gr.Number(form.drift_threshold_pct, minimum=0.1, label="Drift threshold (%)",
                                                 info="above it the sweep is marked noisy",
                                                 elem_id="sw-drift-threshold")
    with gr.Accordion("Fleet: run the cells on a Ray cluster's machines (README: fleet sweeps)", open=False):
        with gr.Row():
            c["cluster"] = gr.Textbox(form.cluster, label="Ray cluster", placeholder="blank: this machine",
                                      info="ray (a cluster started on this machine) or ray:HOST:PORT of its head",
                                      elem_id="sw-cluster")
            c["nodes"] = gr.Textbox(form.nodes, label="Machines (node labels)", placeholder="blank: any node",
                                    info="every cell is measured on each machine carrying one of these Ray "
                                         "resource labels", elem_id="sw-nodes")
    gr.Markdown(axes_note(), elem_id="sw-axes-note")
    missing = {f.name for f in fields(SweepForm)} ^ set(c)
    assert not missing, f"SweepForm fields without a control (or the reverse): {missing}"
    return SweepControls(c)


def build_benchmark_tab(ctx: AppContext) -> BenchmarkTab:
    with gr.Tabs():
        with gr.Tab("Sweep", id="sweep"):
            controls = build_sweep_controls(SweepForm())
            estimate_md = gr.Markdown(elem_id="sw-estimate")
            with gr.Row():
                quick_btn = gr.Button("Quick sweep preset (stock vs lab, about two minutes)", elem_id="sw-quick")
                run_btn = gr.Button("Run sweep", variant="primary", elem_id="sw-run")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="sw-stop")
            progress = gr.HTML(elem_id="sw-progress")
            status = gr.Markdown(elem_id="sw-status")
            with gr.Row():
                f_devices = gr.Dropdown(devices(), multiselect=True, label="Filter: device", elem_id="f-devices")
                f_precisions = gr.Dropdown(offered_precisions(), multiselect=True, label="Filter: precision",
                                           elem_id="f-precisions")
                f_status = gr.Dropdown(list(STATUSES), multiselect=True, label="Filter: status", elem_id="f-status")
            table = gr.DataFrame(label="Results (click a header to sort; failed cells keep their reason)",
                                 interactive=False, elem_id="sw-table", show_search="search", max_height=420)
            gain = gr.Markdown(elem_id="sw-gain")
            with gr.Row():
                fig_latency = gr.Plot(label="Latency vs batch", elem_id="fig-latency")
                fig_rtf = gr.Plot(label="RTF by configuration and threads", elem_id="fig-rtf")
            with gr.Row():
                fig_pareto = gr.Plot(label="Throughput vs latency (Pareto front)", elem_id="fig-pareto")
                fig_memory = gr.Plot(label="Peak memory", elem_id="fig-memory")
            fig_roofline = gr.Plot(label="Distance from the memory-bandwidth floor", elem_id="fig-roofline")
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
            quality = build_quality_panel()
        with gr.Tab("Serving", id="serving"):
            build_serving_tab(ctx)
        with gr.Tab("History", id="history"):
            with gr.Row():
                refresh_btn = gr.Button("Refresh", elem_id="h-refresh")
            history_table = gr.DataFrame(label="Past sweeps", interactive=False, elem_id="h-table", max_height=300)
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

    view = SweepView(progress, status, gain, table, gr.State(None), gr.State(None),
                     {"latency": fig_latency, "rtf": fig_rtf, "pareto": fig_pareto, "memory": fig_memory,
                      "roofline": fig_roofline})
    history = HistoryView(history_table, pick, cmp_a, cmp_b)
    rec = RecommendView(budget, recommendation, gr.State(None))
    quality.follow(view.results)

    def estimate_changed(values: dict):
        return estimate(ctx, controls.form(values))

    def run_clicked(values: dict, request: gr.Request):
        spec = spec_from_form(ctx.model, controls.form(values), ctx.history_db)
        for update in sweep_updates(ctx, spec, request.session_hash if request else uuid.uuid4().hex):
            yield view.show(update)

    def history_changed():
        return history.refresh(ctx)

    def recommend_clicked(values: dict):
        return rec.show(values[view.results], values[rec.budget])

    def load_clicked(sweep_ids):
        return view.show(load_sweeps(ctx, sweep_ids))

    def compare_clicked(a, b, metric):
        cmp_df, fig, envs = compare_sweeps(ctx, a, b, metric)
        return {cmp_table: cmp_df, cmp_fig: fig, cmp_envs: envs}

    def page_loaded():
        """The hardware panel (this machine, as a sweep would record it) and the sweep history."""
        env = lab_env.capture_environment()
        return {hw_md: "\n".join(f"- {line}" for line in environment_lines(env)), hw_json: env, **history.refresh(ctx)}

    private = dict(api_visibility="private")
    for control in controls.inputs():
        control.change(estimate_changed, controls.inputs(), estimate_md, queue=False, **private)
    quick_btn.click(lambda: controls.show(quick_form()), None, controls.inputs(), queue=False, **private)
    sweep_run = run_btn.click(run_clicked, controls.inputs(), view.outputs(), concurrency_id=MODEL_QUEUE,
                              concurrency_limit=1, show_progress="minimal", **private)
    # A finished (or stopped) sweep is in the history at once: no page reload before History, compare or
    # the recommendation can see it.
    sweep_run.then(history_changed, None, history.outputs(), **private).then(
        recommend_clicked, {view.results, rec.budget}, {rec.text, rec.settings}, **private)
    stop_btn.click(stop_handler, None, None, queue=False, **private)
    for f in (f_devices, f_precisions, f_status):
        f.change(filter_table, [view.results, f_devices, f_precisions, f_status], table, queue=False, **private)
    reports_btn.click(bind(download_reports, ctx), [view.results, view.sweep_id], reports, **private)
    recommend_btn.click(recommend_clicked, {view.results, rec.budget}, {rec.text, rec.settings}, **private)
    refresh_btn.click(history_changed, None, history.outputs(), **private)
    load_btn.click(load_clicked, pick, view.outputs(), **private)
    export_btn.click(bind(export_bundle_handler, ctx), pick, bundle_out, **private)
    bundle_in.upload(bind(import_bundle_handler, ctx), bundle_in, bundle_in, **private).then(
        history_changed, None, history.outputs(), **private)
    cmp_btn.click(compare_clicked, [cmp_a, cmp_b, cmp_metric], {cmp_table, cmp_fig, cmp_envs}, **private)
    _build_api(ctx)
    return BenchmarkTab(rec.settings, apply_best, page_loaded, {hw_md, hw_json, *history.outputs()}, controls)


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


def recommended_or_latest(ctx: AppContext, recommended, budget_mb: float | None = None):
    """The recommendation already made on this page, else one from the latest sweep in the history."""
    if recommended:
        return recommended
    frame = sweeps_frame(ctx.history_db)
    frame = frame[frame["kind"] == "sweep"]
    if frame.empty:
        raise gr.Error("No recommendation yet: run a sweep in the Benchmark tab first.")
    rec = recommend(cells_frame(ctx.history_db, [int(frame["id"].iloc[0])]), budget_mb)
    if rec.settings is None:
        raise gr.Error(rec.reason)
    return rec.settings
