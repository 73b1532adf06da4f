"""Running a sweep from the page: its progress, results and status as `SweepUpdate`s, Stop, the table's filters,
where a sweep is shown (`SweepView`) and the `/run_sweep` API."""

from __future__ import annotations

import html
import uuid
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import gradio as gr
import pandas as pd

from chattts_lab.engines import DEFAULT_ENGINE, DEFAULT_PRECISION
from chattts_lab.history.price import MachinePrice, with_cost
from chattts_lab.history.store import Store, save_price
from chattts_lab.sweep.grid import describe, estimate_grid
from chattts_lab.history.report import results_frame, shown_columns
from chattts_lab.sweep.results import CellResult
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.sweep.runner import (CallTimed, CellFinished, CellStarted, FidelityStarted, PassStarted, QualityStarted,
                               SweepFinished, SweepPlanned, SweepStarted, run_sweep, unused_settings)
from chattts_lab.history import figures
from chattts_lab.said import Said
from chattts_lab.serve import zerogpu
from chattts_lab.serve.context import AppContext
from webui.common import present
from webui.common.events import StopFlags, session_of
from webui.i18n.texts import localized, translator
from webui.benchmark.sweep_form import ON_OFF, SweepForm, price_from_form, spec_from_form

STOPS = StopFlags({})


@dataclass(frozen=True)
class SweepUpdate:
    """One step of a running sweep as the UI shows it; None leaves that part as it is."""

    progress: tuple["Progress", str] | None = None  # how far, and what runs now (said in the page's language)
    results: pd.DataFrame | None = None
    status: str | None = None
    sweep_id: int | None = None
    cells: Sequence[CellResult] = ()  # the rows of `results`, in order, with their raw timed calls


@dataclass(frozen=True)
class Progress:
    """How far a sweep is. Interleaved cells end only with the last pass, so until then the bar counts the calls
    timed so far (`calls` of `total_calls`); `done` counts cells with a row."""

    total: int  # cells in the sweep
    done: int = 0
    pass_no: int = 0  # 1-based number of the pass running; 0 before the first
    passes: int = 0
    calls: int = 0  # calls the passes timed so far
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


def _finished_status(sweep_id, status: str, drift: str, plan: str) -> Said:
    note = FINISH_NOTES.get(status, status)
    return Said.joined([Said("Sweep {sweep} {note}.", sweep=sweep_id, note=note), drift, plan])


def _doing(event) -> Said:
    """What the progress bar says while `event`'s step runs."""
    if isinstance(event, CellStarted):  # once per cell: when its process starts (interleaved cells then wait)
        eta = Said(", about {eta} left", eta=describe(event.eta_s)) if event.eta_s else ""
        return Said("measuring {cell}{eta}", cell=event.config.label, eta=eta)
    if isinstance(event, PassStarted):
        return Said("pass {no} of {passes}: one timed call of each of {cells} cell(s)", no=event.pass_no + 1,
                    passes=event.passes, cells=len(event.order))
    if isinstance(event, CallTimed):
        return Said("pass {no} of {passes}: {timed} of {cells} cell(s) timed, about {eta} left", no=event.pass_no + 1,
                    passes=event.passes, timed=event.timed, cells=event.cells, eta=describe(event.eta_s))
    if isinstance(event, FidelityStarted):
        return Said("fidelity check: {precision} on {device} vs fp32", precision=event.precision, device=event.device)
    return Said("quality beside stock fp32: {what}", what=event.what)


def sweep_updates(ctx: AppContext, spec: SweepSpec, session: str,
                  price: MachinePrice | None = None) -> Iterator[SweepUpdate]:
    """Run a sweep, describing its progress after every event; the Stop button of `session` ends it. With a machine
    price, the sweep keeps it and every row shows its $ per audio hour."""
    flag = STOPS.start(session)

    def frame(rows):
        return with_cost(results_frame(rows), price)

    results, sweep_id, plan = [], None, ""
    progress = Progress(total=len(spec.expand()))
    try:
        with ctx.model_work:  # nothing else touches the CPU's model work while cells are timed
            for event in run_sweep(spec, ctx.history_db, should_stop=flag.is_set):
                if isinstance(event, SweepStarted):
                    sweep_id = event.sweep_id
                    save_price(ctx.history_db, sweep_id, price)
                    yield SweepUpdate((progress, "starting"), frame(results),
                                      Said("Sweep {sweep} running: {cells} cell(s).", sweep=sweep_id,
                                           cells=progress.total), sweep_id, results)
                elif isinstance(event, (CellStarted, FidelityStarted, QualityStarted)):
                    yield SweepUpdate((progress, _doing(event)))
                elif isinstance(event, SweepPlanned):
                    plan = event.plan
                    yield SweepUpdate((progress, "workers loaded"), status=Said.joined(
                        [Said("Sweep {sweep} running.", sweep=sweep_id), plan]))
                elif isinstance(event, PassStarted):
                    calls = progress.calls if progress.pass_no else 0
                    progress = replace(progress, pass_no=event.pass_no + 1, passes=event.passes, calls=calls,
                                       total_calls=calls + len(event.order) * (event.passes - event.pass_no))
                    yield SweepUpdate((progress, _doing(event)))
                elif isinstance(event, CallTimed):  # the bar moves with each cell timed, not only at a pass
                    progress = replace(progress, calls=progress.calls + 1)
                    yield SweepUpdate((progress, _doing(event)))
                elif isinstance(event, CellFinished):
                    results.append(event.result)
                    progress = replace(progress, done=len(results))
                    label = Said("{cell}: {status}", cell=event.result.config.label, status=event.result.status)
                    yield SweepUpdate((progress, label), frame(results), cells=list(results))
                elif isinstance(event, SweepFinished):
                    # a stopped sweep's bar shows what was measured, not its cancelled rows
                    progress = replace(progress, done=sum(r.status != "cancelled" for r in event.results))
                    drift = (event.drift or {}).get("sentence", "")
                    yield SweepUpdate((progress, FINISH_NOTES.get(event.status, event.status)), frame(event.results),
                                      _finished_status(sweep_id, event.status, drift, plan), sweep_id, event.results)
    finally:
        STOPS.done(session)


# ----------------------------------------------------------------------------------------------
# On ZeroGPU (chattts_lab.serve.zerogpu): a sweep with CUDA cells runs while the GPU is lent


def sweep_seconds(spec, history_db, session: str, price=None) -> float:
    return zerogpu.START_S + estimate_grid(spec, history_db).seconds


@zerogpu.gpu(duration=sweep_seconds)
def gpu_sweep(spec, history_db, session: str, price=None) -> Iterator:
    """A sweep with CUDA cells, run while the GPU is lent: its updates as it makes them. Its arguments are plain data
    (ZeroGPU pickles them into its own process, where this app's context is made afresh)."""
    yield from sweep_updates(AppContext(history_db=history_db), spec, session, price)


def check_sweep(spec, history_db) -> None:
    if uses_gpu(spec):
        zerogpu.check_duration(sweep_seconds(spec, history_db, ""), "This sweep",
                               "sweep fewer cells or tokens, or run it with `python -m bench` on a GPU machine")


def uses_gpu(spec) -> bool:
    return any(str(d).startswith("cuda") for d in spec.devices)


def sweep_updates_for(ctx, spec, session: str, price=None) -> Iterator:
    """A sweep's updates: on ZeroGPU a sweep with CUDA cells runs while the GPU is lent (refused first when it would
    need it too long); any other sweep as always."""
    if zerogpu.active() and uses_gpu(spec):
        check_sweep(spec, ctx.history_db)
        return gpu_sweep(spec, ctx.history_db, session, price)
    return sweep_updates(ctx, spec, session, price)


def stop_handler(request: gr.Request = None):
    if not STOPS.stop(session_of(request)):
        present.info("No sweep of yours is running.", request)
    else:
        present.info("Stopping: the running cell is ended and every finished row is kept.", request)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in str(text).split(",") if t.strip())


def api_run_sweep(ctx: AppContext, devices: str = "cpu", precisions: str = DEFAULT_PRECISION, batches: str = "1",
                  threads: str = "", tokens: str = "32", repeats: int = 1, stream: bool = False,
                  engines: str = DEFAULT_ENGINE, compile: bool = False, warmup: int = 0, min_time_s: float = 0.0,
                  fidelity: bool = False, passes: int = SweepSpec.passes, price_usd_per_hour: float = 0.0,
                  price_source: str = ""):
    """The `/run_sweep` API: comma lists as in `python -m bench` (empty threads: every usable core); returns the
    results table when done, each row with its sweep's `sweep_id`, `drift_pct`, `noisy` and `sweep_note` (the
    drift sentence, and which settings took no effect). The first seven parameters keep the README's order; later
    ones have defaults. With `passes` > 1 (interleaved) each cell is timed once per pass: `repeats` and
    `min_time_s` apply with passes=1 only. A `price_usd_per_hour` (with its `price_source`) adds each row's
    `usd_per_audio_hour` and is kept with the sweep."""
    form = replace(SweepForm(), devices=_csv(devices), precisions=_csv(precisions), batches=batches, threads=threads,
                   tokens=tokens, repeats=repeats, streams=(ON_OFF[bool(stream)],), engines=_csv(engines),
                   compiles=(ON_OFF[bool(compile)],), warmup=warmup, min_time_s=min_time_s, fidelity=fidelity,
                   passes=passes, price_usd_per_hour=price_usd_per_hour, price_source=price_source)
    final, sweep_id, spec = pd.DataFrame(), None, spec_from_form(ctx.policy.model, form, ctx.history_db)
    try:
        updates = sweep_updates_for(ctx, spec, uuid.uuid4().hex, price_from_form(form))
    except zerogpu.OverGpuLimit as exc:
        raise gr.Error(str(exc)) from None
    for update in updates:
        if update.results is not None:
            final, sweep_id = update.results, update.sweep_id or sweep_id
    return display_frame(final).assign(**sweep_columns(ctx, sweep_id, unused_settings(spec)))


def sweep_columns(ctx: AppContext, sweep_id: int | None, unused: str) -> dict:
    """What `/run_sweep` adds to every row: how steady the machine was over the sweep, and what took no effect."""
    drift = {}
    if sweep_id is not None:
        with Store(ctx.history_db) as store:
            drift = store.notes(sweep_id).get("drift") or {}
    note = " ".join(filter(None, [drift.get("sentence"), f"Note: {unused}." if unused else ""]))
    return {"sweep_id": sweep_id, "drift_pct": drift.get("drift_pct"), "noisy": drift.get("noisy"), "sweep_note": note}


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
    filter_note: gr.Markdown  # says when the filters keep no row

    def outputs(self) -> set:
        return {self.progress, self.status, self.gain, self.table, self.results, self.sweep_id, self.filter_note,
                *self.plots.values()}

    def show(self, update: SweepUpdate, request=None) -> dict:
        """What the page shows of `update`, its sentences and plots in the language of `request`'s browser."""
        out = {}
        if update.progress is not None:
            bar, text = update.progress
            out[self.progress] = bar.html(localized(text, request))
        if update.status is not None:
            out[self.status] = localized(update.status, request)
        if update.sweep_id is not None:
            out[self.sweep_id] = update.sweep_id
        if update.results is not None:
            df = update.results
            out |= {self.table: display_frame(df), self.results: df, self.filter_note: "",
                    self.gain: localized(figures.gain_sentence(df, update.cells), request)}
            out |= self.plots_for(df, None, request)
        return out

    def plots_for(self, df: pd.DataFrame, empty_note: str | None, request=None) -> dict:
        figs = figures.all_figures(df, empty_note and localized(empty_note, request), translator(request))
        return {self.plots[name]: fig for name, fig in figs.items()}

    def filtered(self, df: pd.DataFrame | None, devs, precs, statuses, request: gr.Request = None) -> dict:
        """The table and the plots narrowed to the rows the filters keep (none chosen in a filter: all pass)."""
        if df is None or len(df) == 0:
            return {}
        keep = pd.Series(True, index=df.index)
        for column, chosen in (("device", devs), ("precision", precs), ("status", statuses)):
            keep &= df[column].isin(chosen or df[column].unique())
        shown = df[keep]
        note = "No row matches these filters: clear one (its ×) to see the rows again." if shown.empty else ""
        return {self.table: display_frame(shown), self.filter_note: localized(note, request),
                **self.plots_for(shown, note or None, request)}
