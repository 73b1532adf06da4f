"""ChatTTS Lab's web app: `python app.py [--host H] [--port P] [--auth user:pass] [--share] [--model M] [--mcp]`.

Pure composition: one builder per tab (webui/), the OpenAI-compatible route beside the UI, and
argument parsing. No model loads at import time; the first request loads it, with progress shown.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

try:  # ZeroGPU patches torch, so it comes first; a no-op off ZeroGPU, and optional (chattts_lab/serve/zerogpu.py)
    import spaces  # noqa: F401
except ImportError:
    pass

import gradio as gr  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from chattts_lab.checks import SpecError  # noqa: E402
from chattts_lab.options import add_spec_options  # noqa: E402
from chattts_lab.serve.policy import GROUP, ServingPolicy  # noqa: E402
from chattts_lab.devices import DeviceUnavailable, parse_device  # noqa: E402
from chattts_lab.models import ModelUnavailable, resolve_source  # noqa: E402
from chattts_lab.engines import unsupported_reason  # noqa: E402
from chattts_lab.serve import openai_api, uploads, speech  # noqa: E402
from chattts_lab.serve import zerogpu  # noqa: E402
from chattts_lab.serve.listen import port_taken, refuse_taken_port  # noqa: E402
from webui import mcp_tools
from webui.common import present  # noqa: E402
from webui.benchmark.tab import build_benchmark_tab, recommended_or_latest  # noqa: E402
from chattts_lab.serve.context import AppContext  # noqa: E402
from webui.common.events import bind  # noqa: E402
from webui.i18n.texts import I18N, t  # noqa: E402
from chattts_lab.serve.runtime import CHOSEN, RuntimeSettings, ServingChoice, describe  # noqa: E402
from webui.synthesis.handlers import apply_settings, refresh_serving  # noqa: E402
from webui.synthesis.tab import build_synthesis_tab  # noqa: E402
from webui.synthesis.voice_handlers import saved_voices  # noqa: E402

MODEL_NAMES = ("auto", "hf", "synthetic", "synthetic-full", "synthetic-tiny")
INTRO = "Try ChatTTS voices and measure how fast they run on this machine."
HEADER = """Model: **{model}** (loads on first use). {hardware}"""


def build_app(ctx: AppContext, mcp: bool = False) -> gr.Blocks:
    with gr.Blocks(title="ChatTTS Lab") as demo:
        gr.Markdown("# ChatTTS Lab")
        gr.Markdown(t(INTRO), elem_id="intro")
        gr.Markdown(HEADER.format(model=ctx.policy.model, hardware=zerogpu.hardware_line()), elem_id="header")
        with gr.Tabs():
            with gr.Tab(t("Synthesis"), id="synthesis", elem_id="tab-synthesis"):
                synth = build_synthesis_tab(ctx)
            with gr.Tab(t("Benchmark"), id="benchmark", elem_id="tab-benchmark"):
                bench = build_benchmark_tab(ctx)
        # The benchmark's recommendation (for the sweep on the page, under its memory budget) flows into the
        # synthesis tab's runtime controls; after a sweep, and when a page opens, the synthesis tab shows what
        # the history now says (chattts_lab.serve.runtime.serving_choice).
        for button in (synth.apply_best, bench.apply_best):
            button.click(bind(recommended_or_latest, ctx), [bench.results, bench.budget], bench.recommended,
                         api_visibility="private").success(bind(apply_settings, synth), bench.recommended,
                                                          synth.runtime_controls(), api_visibility="private")
        serving = dict(fn=bind(refresh_serving, ctx, synth), inputs={synth.runtime, synth.chosen, synth.in_use},
                       outputs=synth.runtime_controls() | {synth.fastest, synth.use_fastest}, api_visibility="private")
        bench.sweep_done.then(**serving)
        loaded = demo.load(bench.on_load, None, bench.load_outputs, api_visibility="private").then(**serving)
        loaded.then(bind(saved_voices, ctx, synth), None, synth.saved_voice, api_visibility="private")
        if mcp:
            mcp_tools.build_mcp_tools(ctx)
    return demo


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1, or $GRADIO_SERVER_NAME); 0.0.0.0 for a LAN")
    p.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    p.add_argument("--share", action="store_true", help="also open a temporary public gradio.live link")
    p.add_argument("--mcp", action="store_true", default=os.environ.get("CHATTTS_LAB_MCP") == "1",
                   help="also serve MCP tools for agents (speak, list_voices, quick_benchmark, recommend_configuration) "
                        "at /gradio_api/mcp/; with --auth they need the same Bearer key as /v1; or set $CHATTTS_LAB_MCP=1")
    p.add_argument("--enable-monitoring", action="store_true", help="serve Gradio's /monitoring dashboard (off by default)")
    add_spec_options(p.add_argument_group(GROUP), ServingPolicy, GROUP)  # shared with Ray Serve's command line
    return p.parse_args(argv)


def chosen_on_command_line(serving: ServingChoice, policy: ServingPolicy) -> ServingChoice:
    """The serving configuration with what the command line named; what cannot run here is an error."""
    start = serving.settings
    wanted = RuntimeSettings(policy.device or start.device, policy.precision or start.precision,
                             policy.threads or start.threads, policy.engine or start.engine)
    try:
        reason = unsupported_reason(wanted.engine, parse_device(wanted.device), wanted.precision)
    except DeviceUnavailable as exc:
        reason = str(exc)
    if reason:
        raise SystemExit(f"cannot serve {describe(wanted)} here: {reason}")
    return ServingChoice(wanted, f"{CHOSEN} the command line")


def check_model_folder(model: str) -> None:
    """A --model folder that cannot load is refused now, in one line, instead of failing every request later."""
    if model.strip() in MODEL_NAMES:  # found or built when first used (`auto` falls back to synthetic weights)
        return
    try:
        resolve_source(model)
    except ModelUnavailable as exc:
        raise SystemExit(f"--model {model}: {exc} (use auto, hf, synthetic, synthetic-tiny or a model folder)")


def context_from_args(args: argparse.Namespace) -> AppContext:
    """The app's context, carrying the serving policy its flags give (as Ray Serve's plan carries it); a flag that
    cannot be served here ends the program with the reason."""
    try:
        policy = ServingPolicy.from_args(args)
    except SpecError as exc:
        raise SystemExit(str(exc)) from None
    check_model_folder(policy.model)
    ctx = AppContext.from_env(policy)
    if policy.chooses_configuration():
        ctx = replace(ctx, serving=chosen_on_command_line(ctx.serving, policy))
    return ctx


def main(argv=None) -> None:
    args = parse_args(argv)
    ctx = context_from_args(args)
    refuse_taken_port(args.port)
    policy = ctx.policy
    auth = tuple(policy.auth.split(":", 1)) if policy.auth else None
    speech.preload(ctx, speech.serving_settings(ctx))  # on the CPU, ZeroGPU too (its GPU calls load their own copy)
    demo = build_app(ctx, mcp=args.mcp)
    demo.queue(default_concurrency_limit=4)
    guard = [Middleware(mcp_tools.BearerGuard, api_key=policy.auth)] if args.mcp and policy.auth else []
    try:
        app, _, _ = demo.launch(
            server_name=args.host, server_port=args.port, auth=auth, share=args.share,
            enable_monitoring=args.enable_monitoring, prevent_thread_lock=True,
            allowed_paths=[str(ctx.outputs_dir)], css=present.CSS, footer_links=["api", "settings"],  # language
            i18n=I18N,
            max_file_size=uploads.MAX_UPLOAD,  # larger uploads get HTTP 413 before any handler reads them
            mcp_server=args.mcp, app_kwargs={"middleware": guard},
        )
    except OSError as exc:  # taken since refuse_taken_port looked, or (no --port) none free from 7860 on
        if "Cannot find empty port" not in str(exc):
            raise
        raise SystemExit(port_taken(args.port) if args.port else str(exc)) from None
    if args.mcp:
        mcp_tools.keep_only_tools(demo)
    openai_api.install(app, openai_api.speech_router(ctx))
    demo.block_thread()


if __name__ == "__main__":
    main()
