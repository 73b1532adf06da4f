"""Agents over MCP: the official `mcp` client, over Streamable HTTP, against the real app (`python app.py --mcp`)."""

from __future__ import annotations

import io
import urllib.request

import pytest
import soundfile as sf

from tests.conftest import start_app, stop_app
from tests.support.event_loop import run_in_fresh_loop

pytest.importorskip("mcp")

TOOLS = {"speak", "list_voices", "quick_benchmark", "recommend_configuration"}
KEY = "agent:a-long-passphrase"


@pytest.fixture(scope="module")
def mcp_app(tmp_path_factory):
    url, proc = start_app(tmp_path_factory.mktemp("mcp"), "--mcp")
    yield url
    stop_app(proc)


@pytest.fixture(scope="module")
def mcp_app_with_auth(tmp_path_factory):
    url, proc = start_app(tmp_path_factory.mktemp("mcp-auth"), "--mcp", "--auth", KEY)
    yield url
    stop_app(proc)


def mcp_call(url: str, work, headers: dict | None = None):
    """Open an MCP session on the app's Streamable HTTP endpoint and run `work(session)` in it."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        async with streamablehttp_client(url + "gradio_api/mcp/", headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)

    return run_in_fresh_loop(run())


def list_tools(session):
    async def names():
        return {tool.name: tool for tool in (await session.list_tools()).tools}
    return names()


def call(name: str, arguments: dict):
    return lambda session: session.call_tool(name, arguments)


def test_the_four_tools_are_listed_with_descriptions_for_an_agent(mcp_app):
    tools = mcp_call(mcp_app, list_tools)
    assert set(tools) == TOOLS  # /synthesize and /run_sweep stay gradio_client's, not tools
    speak = tools["speak"]
    assert "text-to-speech" in speak.description and "list_voices" in speak.inputSchema["properties"]["voice"][
        "description"]
    assert speak.inputSchema["required"] == ["text"]
    assert "memory" in tools["recommend_configuration"].inputSchema["properties"]["memory_budget_mb"]["description"]


def test_speak_returns_a_wav_of_the_tokens_it_made_and_says_the_audio_is_noise(mcp_app):
    result = mcp_call(mcp_app, call("speak", {"text": "Hello from an agent.", "voice": "Bo"}))
    assert not result.isError, result.content
    url, summary = result.content[0].text, result.content[1].text
    with urllib.request.urlopen(url) as r:
        wav, sr = sf.read(io.BytesIO(r.read()))
    import json
    facts = json.loads(summary)
    assert sr == facts["sample_rate"] == 24_000
    assert len(wav) == (2 * facts["audio_tokens"] - 1) * 256
    assert facts["warning"] == "Synthetic (random) weights: the timings are real, the audio is noise."


def test_list_voices_names_the_presets(mcp_app):
    result = mcp_call(mcp_app, call("list_voices", {}))
    assert "Aria" in result.content[0].text and "seed:N" in result.content[0].text


@pytest.mark.parametrize("text, voice, message", [
    ("", "Aria", "text is empty"),
    ("Hello", "Nobody", "unknown voice"),
    ("Hello", "{not a card", "not valid JSON"),
])
def test_bad_input_gets_the_same_message_as_the_page_and_gradio_client(mcp_app, text, voice, message):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    result = mcp_call(mcp_app, call("speak", {"text": text, "voice": voice}))
    assert result.isError and message in result.content[0].text
    with pytest.raises(AppError) as client_error:
        Client(mcp_app, verbose=False).predict(text, voice, api_name="/synthesize")
    assert str(client_error.value) in result.content[0].text


def test_recommendation_before_any_benchmark_says_to_run_one(mcp_app):
    result = mcp_call(mcp_app, call("recommend_configuration", {"memory_budget_mb": 4000}))
    assert result.isError and "run quick_benchmark first" in result.content[0].text


def test_with_auth_the_mcp_route_needs_the_bearer_key(mcp_app_with_auth):
    import httpx

    endpoint = mcp_app_with_auth + "gradio_api/mcp/"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for wrong in ({}, {"Authorization": "Bearer agent:wrong"}):
        r = httpx.post(endpoint, json=init, headers=headers | wrong)
        assert r.status_code == 401 and "Bearer" in r.json()["error"]
    tools = mcp_call(mcp_app_with_auth, list_tools, headers={"Authorization": f"Bearer {KEY}"})
    assert set(tools) == TOOLS
    result = mcp_call(mcp_app_with_auth, call("speak", {"text": "Guarded."}),
                      headers={"Authorization": f"Bearer {KEY}"})
    assert not result.isError and result.content[0].text.endswith(".wav")


@pytest.mark.slow
def test_the_quick_benchmark_runs_and_then_a_configuration_is_recommended_under_a_budget(mcp_app):
    """Runs after the test above that expects an empty history (file order); about two minutes on tiny weights."""
    result = mcp_call(mcp_app, call("quick_benchmark", {}))
    assert not result.isError, result.content
    report = result.content[0].text
    assert "| engine | precision |" in report and "| stock |" in report and "| lab |" in report
    advice = mcp_call(mcp_app, call("recommend_configuration", {"memory_budget_mb": 100_000}))
    assert not advice.isError and "python app.py --engine " in advice.content[0].text
