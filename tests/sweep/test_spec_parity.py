"""One spec, two doors: SweepSpec's fields are `python -m bench`'s options and the Benchmark tab's defaults, and one
builder (SweepSpec.from_choices) reads either. Here the tab's controls and the command line (with the flag spellings
the README uses, written by hand) give the same SweepSpec, the command line the tab shows runs it, and each path
stores the same spec in a real SQLite file."""

from __future__ import annotations

import shlex
from dataclasses import fields

import gradio as gr
import pytest

from bench.cli import build_parser, spec_from_args
from chattts_lab.trackers.env import usable_cores
from chattts_lab.options import as_text, spec_argv
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.store import Store
from tests.conftest import TINY
from tests.support.cli import bench_here
from tests.support.sweep_specs import QUICK_ARGV, cli_spec
from webui.benchmark.tab import build_benchmark_tab, cli_command, quick_form, spec_from_form, sweep_updates
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.policy import ServingPolicy

# (the tab's controls set by name, the same choices as `python -m bench` arguments); both written by hand.
CASES = {
    "untouched form = no grid arguments": ({}, []),
    "engines, precisions, ranges, streaming": (
        dict(engines=["stock", "lab"], precisions=["fp32", "int8"], batches="1-8*2", threads="1-2", tokens="32,64",
             streams=["off", "on"], repeats=2, warmup=0, min_time_s=0, fidelity=False),
        ["--engine", "stock,lab", "--precision", "fp32,int8", "--batch", "1-8*2", "--threads", "1-2",
         "--tokens", "32,64", "--stream", "off,on", "--repeats", "2", "--warmup", "0", "--min-time", "0",
         "--fidelity", "off"]),
    "compile (what a CUDA machine's form sends) and the measurement settings": (
        dict(engines=["lab"], precisions=["int8", "int4"], compiles=["off", "on"], batches="1,4", tokens="16",
             max_repeats=7, timeout_s=60, memory_budget_mb=3000, fidelity_tokens=16),
        ["--engine", "lab", "--precision", "int8,int4", "--compile", "off,on", "--batch", "1,4", "--tokens", "16",
         "--max-repeats", "7", "--timeout", "60", "--memory-budget-mb", "3000", "--fidelity-tokens", "16"]),
    "empty threads = every usable core": (dict(threads=""), []),
    "quality beside stock fp32": (dict(quality=True), ["--quality"]),
    "interleaved passes and the drift threshold": (
        dict(batches="1,2", passes=5, drift_threshold_pct=7.5), ["--batch", "1,2", "--passes", "5",
                                                                  "--drift-threshold", "7.5"]),
    "one process per cell (passes 1)": (dict(batches="1,2", passes=1), ["--batch", "1,2", "--passes", "1"]),
    "a fleet sweep: every cell on each labelled machine of a Ray cluster": (
        dict(cluster="ray:10.0.0.5:6379", nodes="gpu-box, laptop"),
        ["--cluster", "ray:10.0.0.5:6379", "--nodes", "gpu-box,laptop"]),
}
@pytest.fixture(scope="module")
def tab(tmp_path_factory):
    """The real Benchmark tab, built as the app builds it."""
    out = tmp_path_factory.mktemp("parity")
    ctx = AppContext(ServingPolicy(model=TINY), outputs_dir=out, history_db=out / "history.sqlite")
    with gr.Blocks():
        built = build_benchmark_tab(ctx)
    return ctx, built.controls


def form_values(controls, choices: dict) -> dict:
    """What the browser sends: each control's shown value, preprocessed as Gradio does, with `choices` set by name."""
    values = {component: component.value for component in controls.inputs()}
    values.update({controls.by_name[name]: value for name, value in choices.items()})
    return {component: component.preprocess(value) for component, value in values.items()}


@pytest.mark.parametrize("choices, argv", CASES.values(), ids=CASES.keys())
def test_the_tab_builds_the_spec_the_cli_builds(tab, choices, argv):
    ctx, controls = tab
    assert spec_from_form(TINY, controls.form(form_values(controls, choices))) == cli_spec(argv)


@pytest.mark.parametrize("choices, argv", CASES.values(), ids=CASES.keys())
def test_the_command_line_the_tab_shows_runs_the_same_spec(tab, choices, argv):
    ctx, controls = tab
    form = controls.form(form_values(controls, choices))
    words = shlex.split(cli_command(TINY, ctx.history_db, form))
    assert words[:3] == ["python", "-m", "bench"]
    assert spec_from_args(build_parser().parse_args(words[3:])) == spec_from_form(TINY, form)


def test_the_quick_preset_is_stock_against_lab_at_fp32_and_int8_batch_1(tab):
    ctx, controls = tab
    shown = controls.show(quick_form())  # what the preset button puts into the controls
    values = {component: component.preprocess(value) for component, value in shown.items()}
    assert spec_from_form(TINY, controls.form(values)) == cli_spec(QUICK_ARGV)


def test_an_untouched_command_line_and_form_run_the_specs_own_defaults(tab):
    ctx, controls = tab
    assert cli_spec([]) == SweepSpec(model=TINY) == spec_from_form(TINY, controls.form(form_values(controls, {})))
    assert SweepSpec().threads == (usable_cores(),) and spec_from_args(build_parser().parse_args([])).model == "auto"


def test_every_flagged_field_is_an_option_whose_help_says_its_default_and_its_argv_parses_back():
    options = {a.dest: a for a in build_parser()._actions}
    spec = SweepSpec(model=TINY, devices=("cpu", "cuda:1"), precisions=("int8", "int4"), batches=(1, 4),
                     threads=(1, 3), tokens=(16,), engines=("lab", "onnx"), compiles=(False, True),
                     streams=(True,), warmup=0, repeats=5, min_time_s=0.5, max_repeats=9, timeout_s=60.0,
                     fidelity=False, fidelity_tokens=8, quality=True, memory_budget_mb=512.0, passes=1, drift_threshold_pct=2.5,
                     cluster="ray:10.0.0.5:6379", nodes=("gpu-box", "laptop"), kernel_levels=("avx2", "portable"))
    base = SweepSpec()
    for f in fields(SweepSpec):
        if f.metadata.get("flag"):
            assert f.metadata["flag"] in options[f.name].option_strings
            assert "(default" in options[f.name].help
            assert getattr(spec, f.name) != getattr(base, f.name), f"pick a value other than the default: {f.name}"
    assert f"(default: {as_text(base.passes)})" in options["passes"].help
    assert spec_from_args(build_parser().parse_args(spec_argv(spec))) == spec


def _stored_specs(db) -> list[dict]:
    with Store(db) as store:
        return [store.sweep(s["id"])["spec"] for s in store.sweeps_list()]


def test_the_tab_and_the_cli_store_the_same_spec(tab, tmp_path, capsys):
    ctx, controls = tab
    # More threads than usable cores: the rule table skips every cell without starting a worker, so both sweeps
    # end at once; what is compared is the spec each stored.
    threads = str(usable_cores() + 1)
    choices = dict(engines=["stock", "lab"], precisions=["fp32", "int8"], batches="1,2", threads=threads,
                   tokens="8", repeats=1, warmup=0, min_time_s=0, fidelity=False, passes=4)
    argv = ["--engine", "stock,lab", "--precision", "fp32,int8", "--batch", "1,2", "--threads", threads,
            "--tokens", "8", "--repeats", "1", "--warmup", "0", "--min-time", "0", "--fidelity", "off",
            "--passes", "4"]
    ui_db = tmp_path / "ui.sqlite"
    ui_ctx = AppContext(ServingPolicy(model=TINY), outputs_dir=tmp_path, history_db=ui_db)
    updates = list(sweep_updates(ui_ctx, spec_from_form(TINY, controls.form(form_values(controls, choices))), "t"))
    assert "finished" in updates[-1].status
    cli_db = tmp_path / "cli.sqlite"
    bench_here(capsys, "--model", TINY, "--db", str(cli_db), *argv, "--format", "json", "--out",
               str(tmp_path / "cli-report"))
    (ui_spec,), (cli_stored,) = _stored_specs(ui_db), _stored_specs(cli_db)
    assert ui_spec == cli_stored
    assert ui_spec["engines"] == ["stock", "lab"] and ui_spec["precisions"] == ["fp32", "int8"]
    assert ui_spec["passes"] == 4


def test_the_run_sweep_api_stores_the_spec_the_cli_builds(app_url, app_dir):
    """`/run_sweep` by parameter name, the new ones (engines, compile, ...) included, against the app's history."""
    from gradio_client import Client

    threads = str(usable_cores() + 1)  # every cell skipped by rule: see above
    Client(app_url, verbose=False).predict(
        devices="cpu", precisions="fp32,int8", batches="1", threads=threads, tokens="8", repeats=1, stream=True,
        engines="stock,lab", compile=True, warmup=0, min_time_s=0, fidelity=False, api_name="/run_sweep")
    stored = _stored_specs(app_dir / "history.sqlite")[0]  # the newest sweep
    argv = ["--engine", "stock,lab", "--precision", "fp32,int8", "--batch", "1", "--threads", threads, "--tokens", "8",
            "--repeats", "1", "--stream", "on", "--compile", "on", "--warmup", "0", "--min-time", "0",
            "--fidelity", "off"]
    assert SweepSpec.from_dict(stored) == cli_spec(argv)

