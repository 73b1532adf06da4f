"""The sweep builder: its values by name (`SweepForm`), the components that show them (`SweepControls`), the spec
and the `python -m bench` command they make, and what can run on this machine."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
from typing import Sequence

import gradio as gr

from chattts_lab.devices import parse_device
from chattts_lab.env import usable_cores
from chattts_lab.grid import bool_list, estimate_grid, int_list, refuse_huge_grid, str_list
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.precision import ENGINES, unsupported_reason
from chattts_lab.spec import SpecError, SweepSpec
from webui.context import AppContext
from webui.runtime import all_precisions, devices, precisions_for

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
    passes: int = SweepSpec.passes  # interleaved passes; 1 runs each cell in its own process, back to back
    drift_threshold_pct: float = SweepSpec.drift_threshold_pct
    cluster: str = ""  # blank: this machine; ray or ray:HOST:PORT: a fleet sweep on that Ray cluster
    nodes: str = ""  # Ray resource labels of the machines to measure every cell on (comma list)


def quick_form() -> SweepForm:
    """The newcomer's question (how much faster is the lab engine here?) in about two minutes on 2 cores:
    stock against lab at the precisions a CPU runs well (fp32, int8), batch 1, short clips, no fidelity pass."""
    engines = [e for e in ("stock", "lab") if e in runnable_engines()]
    precisions = [p for p in ("fp32", "int8") if any(p in precisions_for("cpu", e) for e in engines)]
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
            batches=named_ints(form.batches, "Batch sizes"),
            threads=named_ints(form.threads, "Threads") if str(form.threads or "").strip() else (usable_cores(),),
            tokens=named_ints(form.tokens, "Audio tokens"), warmup=_number(form.warmup, "warm-up calls", int),
            repeats=_number(form.repeats, "repeats", int), min_time_s=_number(form.min_time_s, "min seconds per cell"),
            max_repeats=max(_number(form.max_repeats, "max repeats", int), _number(form.repeats, "repeats", int)),
            timeout_s=_number(form.timeout_s, "timeout per cell"), fidelity=bool(form.fidelity),
            fidelity_tokens=_number(form.fidelity_tokens, "fidelity tokens", int),
            memory_budget_mb=None if form.memory_budget_mb in (None, "") else float(form.memory_budget_mb),
            passes=_number(form.passes, "passes", int),
            drift_threshold_pct=_number(form.drift_threshold_pct, "drift threshold"),
            cluster=str(form.cluster or "").strip() or None, nodes=str_list(form.nodes) if _given(form.nodes) else (),
        )
        refuse_huge_grid(spec.validate(), history_db)  # too large to finish: refused with the estimate
        return spec
    except (SpecError, TypeError, ValueError) as exc:
        raise gr.Error(f"Sweep settings: {exc}") from exc


def named_ints(text, label: str) -> tuple[int, ...]:
    """A list or range box's numbers; a mistake names the box it is in."""
    try:
        return int_list(text)
    except SpecError as exc:
        raise SpecError(f"{label}: {exc}") from None


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


def runnable_engines() -> list[str]:
    return [e for e in ENGINES if any(precisions_for(d, e) for d in devices())]


def offered_precisions() -> list[str]:
    return [p for p in all_precisions() if any(p in precisions_for(d, e) for d in devices() for e in ENGINES)]


def has_cuda() -> bool:
    return any(d.startswith("cuda") for d in devices())


def axes_note() -> str:
    """What runs on this machine, per device and engine, and why the rest is not offered."""
    lines = []
    for device in devices():
        runs = " · ".join(f"{e} {', '.join(precisions_for(device, e)) or 'nothing'}" for e in ENGINES)
        lines.append(f"- **{device}**: {runs}")
        lines += [f"  - {e} {p}: {unsupported_reason(e, parse_device(device), p)}" for e in ENGINES
                  for p in offered_precisions() if p not in precisions_for(device, e)]
    absent = [d for d in ("cuda", "mps") if not any(h.startswith(d) for h in devices())]
    if absent:
        lines.append(f"- Not offered: {', '.join(absent)} (not present on this machine).")
    if not has_cuda():
        lines.append("- torch.compile stays off: it is ignored off CUDA (stock ChatTTS silently ignores it; the lab "
                     "engine measured no gain on CPU and runs eager).")
    return ("**What runs here** (a combination outside this list becomes an `unsupported` row with its reason, "
            "as in `python -m bench`):\n" + "\n".join(lines))



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



def build_sweep_controls(form: SweepForm) -> SweepControls:
    """One component per SweepForm field, showing `form`; only what can run here is offered (axes_note says why)."""
    c = {}
    _axes_rows(c, form)
    _more_settings(c, form)
    gr.Markdown(axes_note(), elem_id="sw-axes-note")
    missing = {f.name for f in fields(SweepForm)} ^ set(c)
    assert not missing, f"SweepForm fields without a control (or the reverse): {missing}"
    return SweepControls(c)


def _axes_rows(c: dict, form: SweepForm) -> None:
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


def _more_settings(c: dict, form: SweepForm) -> None:
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
