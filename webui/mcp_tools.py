"""What an agent can ask of the app over MCP (`python app.py --mcp`): speak, list voices, benchmark, recommend.

Gradio serves every public named endpoint as an MCP tool (`launch(mcp_server=True)`, Streamable HTTP at
/gradio_api/mcp/), described by the handler's docstring and type hints, so the four handlers here are written for an
agent to read. The app's other public endpoints (`/synthesize`, `/run_sweep`, for gradio_client) stay off the tool
list (`keep_only_tools`). The tools run outside Gradio's queue (`queue=False`): an MCP call then runs in the MCP
request itself rather than through an HTTP loopback into the queue, which a login (`--auth`) would refuse. Synthesis
still waits in the app's own batcher and a benchmark holds the model alone, as from the page.

With `--auth user:pass` the MCP route asks for `Authorization: Bearer user:pass`, as `/v1` does (`BearerGuard`).
"""

from __future__ import annotations

import hmac
import json
import uuid

import gradio as gr
import pandas as pd

from chattts_lab import SYNTHETIC_WARNING
from chattts_lab.history.frames import cells_frame, sweeps_frame
from chattts_lab.history.recommend import recommend
from chattts_lab.history.report import markdown_table
from chattts_lab.voices import PRESET_VOICES, saved_card_names
from chattts_lab.history import figures
from chattts_lab.serve.context import AppContext
from webui.common.events import bind
from chattts_lab.serve.runtime import describe, serving_choice
from webui.synthesis.handlers import api_synthesize
from webui.benchmark.sweep_form import quick_form, spec_from_form
from webui.benchmark.sweep_run import sweep_updates

MCP_PATH = "/gradio_api/mcp"
TOOLS = ("speak", "list_voices", "quick_benchmark", "recommend_configuration")
TABLE_COLUMNS = ["engine", "precision", "batch_size", "threads", "status", "rtf", "step_ms", "audio_s_per_s",
                 "peak_rss_mb"]


async def speak(ctx: AppContext, text: str, voice: str = "Aria") -> tuple[str, str]:
    """Say a text aloud with ChatTTS (a Chinese and English text-to-speech model) and get the audio as a WAV file.

    Args:
        text: What to say: Chinese, English or both, up to 5,000 characters. Inline tags such as [laugh] and [uv_break] add a laugh or a pause.
        voice: A voice name from list_voices (a preset such as "Aria", or a saved voice), "seed:N" for the speaker drawn from seed N (any integer), or a ChatTTS speaker string. Default "Aria".
    Returns:
        The WAV file (24 kHz mono; its URL), and a summary as JSON: audio_seconds, audio_tokens, wall_seconds, rtf (wall seconds per audio second, below 1 is faster than real time), the configuration it ran on, and a warning when the model has synthetic weights (the timings are real, the audio is noise).
    """
    path, m = await api_synthesize(ctx, text, voice)
    summary = {"audio_seconds": round(sum(m["audio_s"]), 3), "sample_rate": 24_000, "audio_tokens": sum(m["tokens"]),
               "wall_seconds": round(m["wall_s"], 3), "rtf": m["rtf"] and round(m["rtf"], 3),
               "ran_on": m["effective"], "model": m["model"]}
    if m["synthetic"]:
        summary["warning"] = SYNTHETIC_WARNING
    return path, json.dumps(summary, ensure_ascii=False)


def list_voices(ctx: AppContext) -> str:
    """List the voices `speak` accepts by name.

    Returns:
        JSON: presets (names built into the app), saved (voices people saved in this app's voice library), and how to ask for any other speaker by seed.
    """
    return json.dumps({"presets": list(PRESET_VOICES), "saved": saved_card_names(ctx.voices_dir),
                       "other_voices": 'voice="seed:N" (any integer N) picks the speaker drawn from that seed; the '
                                       "same seed always gives the same voice"}, ensure_ascii=False)


def quick_benchmark(ctx: AppContext) -> str:
    """Measure how fast ChatTTS runs on this machine: the quick sweep (stock against lab engine, fp32, int8 and int4, batch 1), a few minutes. Other work waits meanwhile.

    Returns:
        A sentence with the speed-up of the fastest configuration over stock fp32 (with its 95 % interval), and a Markdown table with one row per configuration: rtf (wall seconds per audio second; below 1 is faster than real time), step_ms, audio_s_per_s and peak_rss_mb. The result is kept in the app's history, where recommend_configuration reads it.
    """
    spec = spec_from_form(ctx.policy.model, quick_form(), ctx.history_db)
    final = None
    for update in sweep_updates(ctx, spec, f"mcp-{uuid.uuid4().hex}"):
        if update.results is not None:
            final = update
    if final is None or final.results.empty:
        raise gr.Error("The quick benchmark measured nothing (see the app's log).")
    return _sweep_summary(ctx, final.results, final.cells, final.sweep_id)


def _sweep_summary(ctx: AppContext, df: pd.DataFrame, cells, sweep_id) -> str:
    return "\n".join([f"Sweep #{sweep_id} on this machine ({ctx.policy.model} weights).", figures.gain_sentence(df, cells), "",
                      markdown_table(df, TABLE_COLUMNS)])


def recommend_configuration(ctx: AppContext, memory_budget_mb: float = 0) -> str:
    """Recommend how to run ChatTTS on this machine: the fastest configuration (engine, precision, threads) measured by the latest benchmark here that fits in a memory budget.

    Args:
        memory_budget_mb: The most resident memory (MB) the configuration may use; 0 means no limit.
    Returns:
        The recommendation in words (its real-time factor, latency and peak memory), the configuration the app serves now and why, and how to serve the recommendation (`python app.py --engine E --precision P`). Says so when no benchmark has run yet (run quick_benchmark first).
    """
    sweeps = sweeps_frame(ctx.history_db)
    sweeps = sweeps[sweeps["kind"] == "sweep"] if not sweeps.empty else sweeps
    if sweeps.empty:
        raise gr.Error("No benchmark on this machine yet: run quick_benchmark first.")
    sweep_id = int(sweeps["id"].iloc[0])
    rec = recommend(cells_frame(ctx.history_db, [sweep_id]), float(memory_budget_mb) or None)
    serving = serving_choice(ctx.history_db, ctx.policy.model)
    lines = [f"From sweep #{sweep_id}: {rec.reason}",
             f"The app serves now: {describe(serving.settings)} ({serving.reason})."]
    if rec.settings:
        s = rec.settings
        lines.append(f"To serve the recommendation: python app.py --engine {s['engine']} --precision "
                     f"{s['precision']} --device {s['device']} --threads {s['threads']}")
    return "\n".join(lines)


def build_mcp_tools(ctx: AppContext) -> None:
    """Hidden components behind the four tools' endpoints (the names in TOOLS)."""
    with gr.Group(visible=False):
        text, voice = gr.Textbox(label="text"), gr.Textbox(label="voice", value="Aria")
        audio, summary = gr.Audio(type="filepath", label="audio"), gr.Textbox(label="summary")
        voices, report = gr.Textbox(label="voices"), gr.Textbox(label="report")
        budget = gr.Number(0, label="memory_budget_mb")
        buttons = {name: gr.Button(name) for name in TOOLS}
    tool = dict(queue=False, api_visibility="public")
    buttons["speak"].click(bind(speak, ctx), [text, voice], [audio, summary], api_name="speak", **tool)
    buttons["list_voices"].click(bind(list_voices, ctx), None, voices, api_name="list_voices", **tool)
    buttons["quick_benchmark"].click(bind(quick_benchmark, ctx), None, report, api_name="quick_benchmark", **tool)
    buttons["recommend_configuration"].click(bind(recommend_configuration, ctx), budget, report,
                                             api_name="recommend_configuration", **tool)


def keep_only_tools(demo: gr.Blocks) -> None:
    """Gradio lists every public named endpoint as a tool; only TOOLS are meant for agents (`/synthesize` and
    `/run_sweep` stay for gradio_client). Called right after launch, before anyone can connect."""
    server = demo.mcp_server_obj
    if server is None:
        raise SystemExit(f"--mcp: Gradio could not start its MCP server: {demo.mcp_error}")
    server.tool_to_endpoint = {name: endpoint for name, endpoint in server.tool_to_endpoint.items()
                               if endpoint.lstrip("/") in TOOLS}


class BearerGuard:
    """ASGI middleware: with --auth, requests under MCP_PATH need `Authorization: Bearer user:pass` (as /v1 does);
    Gradio's login guards its own routes but not the MCP mount."""

    def __init__(self, app, api_key: str):
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(MCP_PATH) and not self._authorized(scope):
            body = json.dumps({"error": "missing or wrong key: send the app's --auth user:pass as "
                                        "'Authorization: Bearer user:pass'"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(header.removeprefix(b"Bearer ").strip(), self.key)
