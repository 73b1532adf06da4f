"""The sweep builder: its values by name (`SweepForm`), the components that show them (`SweepControls`), the spec
and the `python -m bench` command they make, and what can run on this machine."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field, fields
from typing import Sequence

import gradio as gr

from chattts_lab.devices import parse_device
from chattts_lab import engines as engine_registry
from chattts_lab.engines import ENGINES, PRECISIONS, unsupported_reason
from chattts_lab.sweep.grid import describe, estimate_grid, int_list, refuse_huge_grid
from chattts_lab.history.price import MachinePrice
from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.options import as_text, spec_argv
from chattts_lab.said import Said
from chattts_lab.sweep.spec import SpecError, SweepSpec
from webui.i18n.texts import ZH, localized, t, tr, wants_chinese
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.runtime import devices, precisions_for

ON_OFF = ("off", "on")
ENGINE_NOTES = {e.name: e.summary for e in engine_registry.all_engines()}
ON_OFF_CHOICES = [(t("off"), "off"), (t("on"), "on")]


# ----------------------------------------------------------------------------------------------
# The sweep builder's values


_SPEC = SweepSpec()  # the defaults, as the spec holds them (threads: every usable core here)
_TEXT_LISTS = ("batches", "threads", "tokens", "nodes")


def _shown(name: str):
    """A spec default as a form control shows it: text for a list box, on/off names for a choice of switches."""
    value = getattr(_SPEC, name)
    if isinstance(value, tuple) and value and isinstance(value[0], bool):
        return tuple(ON_OFF[v] for v in value)
    return as_text(value) if isinstance(value, tuple) and name in _TEXT_LISTS else value


@dataclass(frozen=True)
class SweepForm:
    """The sweep builder's values by name (each a SweepSpec field). Defaults are the spec's, so an untouched form
    runs what `python -m bench` with no grid arguments runs."""

    devices: Sequence[str] = _shown("devices")
    engines: Sequence[str] = _shown("engines")
    precisions: Sequence[str] = _shown("precisions")
    compiles: Sequence[str] = _shown("compiles")
    streams: Sequence[str] = _shown("streams")
    batches: str = _shown("batches")
    threads: str = field(default_factory=lambda: as_text(SweepSpec().threads))  # empty also means every usable core
    tokens: str = _shown("tokens")
    repeats: int = _shown("repeats")
    warmup: int = _shown("warmup")
    min_time_s: float = _shown("min_time_s")
    max_repeats: int = _shown("max_repeats")
    timeout_s: float = _shown("timeout_s")
    memory_budget_mb: float | None = _shown("memory_budget_mb")
    fidelity: bool = _shown("fidelity")
    fidelity_tokens: int = _shown("fidelity_tokens")
    quality: bool = _shown("quality")  # audio quality beside stock fp32 (chattts_lab.quality.sweep): minutes more
    passes: int = _shown("passes")  # interleaved passes; 1 runs each cell in its own process, back to back
    drift_threshold_pct: float = _shown("drift_threshold_pct")
    cluster: str = ""  # blank: this machine; ray or ray:HOST:PORT: a fleet sweep on that Ray cluster
    nodes: str = _shown("nodes")  # Ray resource labels of the machines to measure every cell on (comma list)
    price_usd_per_hour: float | None = None  # what the machine costs: $ per audio hour beside every row (not a spec field)
    price_source: str = ""


def quick_form() -> SweepForm:
    """The newcomer's question (how much faster is the lab engine here, and at what?): stock against lab at fp32,
    int8 and int4 (engines.QUICK_SWEEP), batch 1, short clips, no fidelity pass. `quick_label` says how long it
    takes here."""
    quick_engines, quick_precisions = engine_registry.QUICK_SWEEP
    engines = [e for e in quick_engines if e in runnable_engines()]
    precisions = [p for p in quick_precisions if any(p in precisions_for("cpu", e) for e in engines)]
    return SweepForm(devices=("cpu",), engines=tuple(engines), precisions=tuple(precisions), batches="1",
                     tokens="32", repeats=2, warmup=1, min_time_s=0.0, fidelity=False)


def quick_label(ctx: AppContext) -> str:
    """The quick preset's button: how long the preset takes here, the very estimate the form shows once filled in."""
    spec = spec_from_form(ctx.policy.model, quick_form(), ctx.history_db)
    return Said("Fill in the quick sweep (stock vs lab, about {time} here)",
                time=describe(estimate_grid(spec, ctx.history_db).seconds))


# the list boxes' labels, so that a mistake names the box it is in
LIST_LABELS = {"batches": "Batch sizes", "threads": "Threads", "tokens": "Audio tokens"}


def spec_from_form(model: str, form: SweepForm, history_db=None) -> SweepSpec:
    """UI values -> a validated SweepSpec, by the builder `python -m bench` uses (SweepSpec.from_choices); a grid
    too large to finish is refused with its estimate."""
    try:
        choices = {**asdict(form), "model": model}
        for name, label in LIST_LABELS.items():
            if _given(choices[name]):
                choices[name] = named_ints(choices[name], label)
        spec = SweepSpec.from_choices(choices)
        refuse_huge_grid(spec, history_db)
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
    """The `python -m bench` command line that runs the same sweep into the same history (with the same price)."""
    spec = SweepSpec.from_choices({**asdict(form), "model": model})
    price = price_from_form(form)
    priced = ["--price", f"{price.usd_per_hour:g}", "--price-source", price.source] if price else []
    return "python -m bench " + shlex.join([*spec_argv(spec), "--db", str(db), *priced])


PRICE_FIELDS = ("price_usd_per_hour", "price_source")  # the machine's, not the sweep's: a preset leaves them


def price_from_form(form: SweepForm) -> MachinePrice | None:
    """The machine price the form gives (None when blank); a negative or absurd one is the form's mistake."""
    try:
        return MachinePrice.given(form.price_usd_per_hour, form.price_source)
    except ValueError as exc:
        raise gr.Error(f"Machine price: {exc}") from None


def estimate(ctx: AppContext, form: SweepForm, request=None) -> str:
    """The form's cells and time here, and the same sweep as a command, in the language of `request`'s browser."""
    try:
        spec = spec_from_form(ctx.policy.model, form, ctx.history_db)
    except gr.Error as exc:
        return f"⚠️ {localized(exc.message, request)}"
    summary = localized(estimate_grid(spec, ctx.history_db).summary(), request)
    terminal = "。在终端中运行同一扫描：" if wants_chinese(request) else ". The same sweep from a terminal:"
    return f"{summary}{terminal}\n\n`{cli_command(ctx.policy.model, ctx.history_db, form)}`"


# ----------------------------------------------------------------------------------------------
# What can run here


def runnable_engines() -> list[str]:
    return [e for e in ENGINES if any(precisions_for(d, e) for d in devices())]


def offered_precisions() -> list[str]:
    return [p for p in PRECISIONS if any(p in precisions_for(d, e) for d in devices() for e in ENGINES)]


def has_cuda() -> bool:
    return any(d.startswith("cuda") for d in devices())


# Why a combination does not run, in Chinese (chattts_lab.engines.unsupported_reason's sentences, by their start).
REASONS_ZH = {
    "int4 runs on the lab and onnx engines only": "int4 只能在 lab 和 onnx 引擎上运行；stock 引擎没有 int4 路径"
                                                  "（它运行 fp32、fp16、bf16、int8）",
    "bf16 runs on the stock and lab engines only": "bf16 只能在 stock 和 lab 引擎上运行；onnx 引擎生成 fp32 和 fp16 "
                                                   "计算图并量化为 int8/int4，没有 bf16 计算图",
}
# The note's words in each page language (the page is built with both; gr.I18n shows the browser's).
AXES_NOTE_WORDS = {
    "en": {"nothing": "nothing", "colon": ": ",
           "reason": str,
           "absent": "- Not offered: {} (not present on this machine).",
           "compile": "- torch.compile stays off: it is ignored off CUDA (stock ChatTTS silently ignores it; the lab "
                      "engine measured no gain on CPU and runs eager).",
           "head": "**What runs here** (a combination outside this list becomes an `unsupported` row with its reason, "
                   "as in `python -m bench`):\n"},
    "zh": {"nothing": "无", "colon": "：",
           "reason": lambda reason: next((v for k, v in REASONS_ZH.items() if str(reason).startswith(k)), reason),
           "absent": "- 不提供：{}（本机没有）。",
           "compile": "- torch.compile 保持关闭：非 CUDA 设备上它会被忽略（stock ChatTTS 会静默忽略它；lab 引擎在 CPU "
                      "上测不到收益，以 eager 模式运行）。",
           "head": "**本机可运行的组合**（不在此列表中的组合会成为带原因的 `unsupported` 行，与 `python -m bench` "
                   "相同）：\n"},
}


def axes_note(language: str = "en") -> str:
    """What runs on this machine, per device and engine, and why the rest is not offered (in Chinese, a reason not
    translated yet stays English)."""
    words, lines = AXES_NOTE_WORDS[language], []
    for device in devices():
        runs = " · ".join(f"{e} {', '.join(precisions_for(device, e)) or words['nothing']}" for e in ENGINES)
        lines.append(f"- **{device}**{words['colon']}{runs}")
        lines += [f"  - {e} {p}{words['colon']}{words['reason'](unsupported_reason(e, parse_device(device), p))}"
                  for e in ENGINES for p in offered_precisions() if p not in precisions_for(device, e)]
    absent = [d for d in ("cuda", "mps") if not any(h.startswith(d) for h in devices())]
    if absent:
        lines.append(words["absent"].format(", ".join(absent)))
    if not has_cuda():
        lines.append(words["compile"])
    return words["head"] + "\n".join(lines)


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
    gr.Markdown(tr(axes_note(), axes_note("zh")), elem_id="sw-axes-note")
    missing = {f.name for f in fields(SweepForm)} ^ set(c)
    assert not missing, f"SweepForm fields without a control (or the reverse): {missing}"
    return SweepControls(c)


def _axes_rows(c: dict, form: SweepForm) -> None:
    with gr.Row():
        c["devices"] = gr.CheckboxGroup(devices(), value=list(form.devices), label=t("Devices (present here)"),
                                        elem_id="sw-devices")
        c["engines"] = gr.CheckboxGroup(runnable_engines(), value=list(form.engines), label=t("Engines"),
                                        info=tr("; ".join(f"{e}: {ENGINE_NOTES.get(e, '')}" for e in runnable_engines()),
                                                "；".join(f"{e}：{ZH.get(ENGINE_NOTES.get(e, ''), ENGINE_NOTES.get(e, ''))}"
                                                         for e in runnable_engines())),
                                        elem_id="sw-engines")
        c["precisions"] = gr.CheckboxGroup(offered_precisions(), value=list(form.precisions), label=t("Precisions"),
                                           elem_id="sw-precisions")
    with gr.Row():
        c["compiles"] = gr.CheckboxGroup(
            ON_OFF_CHOICES, value=list(form.compiles), label="torch.compile", interactive=has_cuda(),
            elem_id="sw-compiles", info=t("CUDA only") if has_cuda() else t("ignored off CUDA, so it stays off on this "
                                                                          "machine"))
        c["streams"] = gr.CheckboxGroup(ON_OFF_CHOICES, value=list(form.streams), label=t("Stream"),
                                        info=t("on also measures time to first audio"), elem_id="sw-streams")
    with gr.Row():
        c["batches"] = gr.Textbox(form.batches, label=t("Batch sizes"), info=t("1,4,8 or 1-8*2"), elem_id="sw-batches")
        c["threads"] = gr.Textbox(form.threads, label=t("Threads"), info=t("1,2 or 1-4; empty: every usable core"),
                                  elem_id="sw-threads")
        c["tokens"] = gr.Textbox(form.tokens, label=t("Audio tokens"), info=tr(f"{STEPS_PER_AUDIO_SECOND:.3g} per second of audio",
                                                                          f"每秒音频 {STEPS_PER_AUDIO_SECOND:.3g} 个"), elem_id="sw-tokens")
    with gr.Row():
        c["repeats"] = gr.Number(form.repeats, precision=0, minimum=1, label=t("Repeats"), elem_id="sw-repeats")
        c["passes"] = gr.Number(form.passes, precision=0, minimum=1, label=t("Interleaved passes"),
                                info=t("each pass times every cell once, in a fresh random order (Repeats and Min "
                                       "seconds then do not apply); 1: each cell in its own process"), elem_id="sw-passes")
        c["warmup"] = gr.Number(form.warmup, precision=0, minimum=0, label=t("Warm-up calls"), elem_id="sw-warmup")
        c["min_time_s"] = gr.Number(form.min_time_s, minimum=0, label=t("Min seconds per cell"), elem_id="sw-min-time")
        c["fidelity"] = gr.Checkbox(form.fidelity, label=t("Fidelity check (drift from fp32)"), elem_id="sw-fidelity")
        c["quality"] = gr.Checkbox(form.quality, label=t("Quality beside stock fp32 (MOS, WER, voice; minutes more)"),
                                   elem_id="sw-quality")


def _more_settings(c: dict, form: SweepForm) -> None:
    with gr.Accordion(t("More measurement settings (as in python -m bench)"), open=False):
        with gr.Row():
            c["max_repeats"] = gr.Number(form.max_repeats, precision=0, minimum=1, label=t("Max repeats per cell"),
                                         elem_id="sw-max-repeats")
            c["timeout_s"] = gr.Number(form.timeout_s, minimum=1, label=t("Timeout per cell (s)"), elem_id="sw-timeout")
            c["memory_budget_mb"] = gr.Number(form.memory_budget_mb, minimum=1, label=t("Memory budget per cell (MB)"),
                                              info=t("empty: no limit; over it a cell is oom"), elem_id="sw-memory-budget")
            c["fidelity_tokens"] = gr.Number(form.fidelity_tokens, precision=0, minimum=2, label=t("Fidelity tokens"),
                                             elem_id="sw-fidelity-tokens")
        with gr.Row():
            c["drift_threshold_pct"] = gr.Number(form.drift_threshold_pct, minimum=0.1, label=t("Drift threshold (%)"),
                                                 info=t("above it the sweep is marked noisy"),
                                                 elem_id="sw-drift-threshold")
    with gr.Row():
        c["price_usd_per_hour"] = gr.Number(form.price_usd_per_hour, minimum=0, label=t("Machine price ($ per hour)"),
                                            info=t("optional: adds $ per audio hour to every row (price / audio s "
                                                   "per s); kept with the sweep"), elem_id="sw-price")
        c["price_source"] = gr.Textbox(form.price_source, label=t("Where the price comes from"),
                                       placeholder=t("e.g. AWS c7a.large on-demand, us-east-1, 2026-12"),
                                       elem_id="sw-price-source")
    with gr.Accordion(t("Fleet: run the cells on a Ray cluster's machines (README: fleet sweeps)"), open=False):
        with gr.Row():
            c["cluster"] = gr.Textbox(form.cluster, label=t("Ray cluster"), placeholder=t("blank: this machine"),
                                      info=t("ray (a cluster started on this machine) or ray:HOST:PORT of its head"),
                                      elem_id="sw-cluster")
            c["nodes"] = gr.Textbox(form.nodes, label=t("Machines (node labels)"), placeholder=t("blank: any node"),
                                    info=t("every cell is measured on each machine carrying one of these Ray "
                                           "resource labels"), elem_id="sw-nodes")
