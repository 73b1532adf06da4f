"""The OpenAI-compatible route `/v1/audio/speech`, driven by OpenAI's own Python client against the real app.

Audio of random weights is noise, but its length and its samples are exact: a clip of N audio tokens
(`min_new_token == max_new_token == N`) is (2N-1)*256 samples at 24 kHz, and a fixed sampling seed
(the `seed` extension) makes the same request give the same samples.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import openai
import pytest
import soundfile as sf

from chattts_lab.engines.lab.stream import SEAM_BOUND
from chattts_lab.voices import VoiceCard, save_card
from chattts_lab.serve.openai_api import chattts_speed

N = 48  # audio tokens per test clip
SAMPLES = (2 * N - 1) * 256
FIXED = {"seed": 1, "min_new_token": N, "max_new_token": N}
# ChatTTS's own stream drops near-silent samples (|x| <= 1e-5) from each chunk; on noise that is a handful.
STREAM_DROPS_AT_MOST = SAMPLES // 100
# A streamed mp3 has no gapless tag: LAME's delay (576 + 529 samples) and up to one 576-sample frame of padding.
MP3_EXTRA_AT_MOST = 576 + 529 + 576


@pytest.fixture(scope="module")
def client(app_url):
    return openai.OpenAI(base_url=app_url + "v1", api_key="no-key-needed", max_retries=0, timeout=600)


def speak(client, voice="Aria", response_format="pcm", input="Hello from an OpenAI client.", **extra):
    """One request through the client's streaming helper: (headers, body bytes)."""
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input=input, response_format=response_format, extra_body=extra) as response:
        return response.headers, response.read()


def decode(data: bytes, fmt: str) -> np.ndarray:
    """16-bit samples, as every format here carries them."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2")
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == 24_000
    return audio


def same_clip(a: np.ndarray, b: np.ndarray) -> bool:
    """Two streams of one request: the same audio tokens, but chunks are cut where each listener's buffer asked for
    them (serve.streaming.chunk_due), and a chunk's decode matches the whole clip's only to SEAM_BOUND of its peak,
    plus a sample's rounding to 16 bits."""
    if len(a) != len(b):
        return False
    a, b = a.astype(np.int32), b.astype(np.int32)  # |-32768| does not fit in 16 bits
    peak = max(np.abs(a).max(), np.abs(b).max())
    return np.abs(a - b).max() <= 2 * SEAM_BOUND * peak + 1


def app_log(app_dir, app_url) -> str:
    """What the app printed (tests/conftest.py's start_app sends it to this file)."""
    return (app_dir / f"app-{urllib.parse.urlsplit(app_url).port}.log").read_text()


def test_speed_maps_openai_range_onto_chattts_levels():
    assert {s: chattts_speed(s) for s in (0.25, 0.5, 1.0, 2.0, 4.0)} == {0.25: 0, 0.5: 3, 1.0: 5, 2.0: 7, 4.0: 9}
    levels = [chattts_speed(0.25 + i * 0.01) for i in range(376)]  # 0.25 .. 4.0
    assert levels == sorted(levels) and set(levels) == set(range(10))  # monotonic, every level reachable


def test_default_request_streams_while_the_audio_is_generated(client, app_dir, app_url):
    """Proof without a clock: the client takes the first bytes of a 2,048-token clip and hangs up; the server
    then stops the synthesis short of 2,048 tokens, which it could not if it had made the clip before sending."""
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="Aria", input="A long clip, streamed.", response_format="pcm",
            extra_body={"seed": 1, "min_new_token": 2048, "max_new_token": 2048}) as response:
        assert "content-length" not in response.headers  # chunked: the length is not known up front
        assert float(response.headers["x-chattts-first-audio-s"]) > 0
        assert "x-chattts-wall-s" not in response.headers  # only known at the end, so not a header
        first = next(response.iter_bytes())
        assert len(first) > 0
    # The model serves one request at a time, so this one runs only after the abandoned one has stopped.
    headers, _ = speak(client, response_format="flac", **FIXED)
    assert headers["x-chattts-synthetic"] == "true"
    stopped = [line for line in app_log(app_dir, app_url).splitlines() if "the client hung up" in line]
    assert stopped, "the server did not notice the client hang up"
    tokens = int(stopped[-1].split("after ")[1].split()[0])
    assert tokens < 2048, stopped[-1]


def test_streamed_formats_decode_to_the_clip_and_agree(client):
    pcm_headers, pcm = speak(client, response_format="pcm", **FIXED)
    pcm = decode(pcm, "pcm")
    assert SAMPLES - STREAM_DROPS_AT_MOST <= len(pcm) <= SAMPLES
    assert pcm_headers["content-type"] == "audio/pcm" and pcm_headers["x-chattts-synthetic"] == "true"
    wav_headers, wav = speak(client, response_format="wav", **FIXED)
    assert wav[:4] == b"RIFF" and wav[4:8] == b"\xff\xff\xff\xff"  # a streaming header: length unknown
    assert same_clip(decode(wav, "wav"), pcm)  # the same seed gives the same samples, to the seams' rounding
    mp3_headers, mp3 = speak(client, response_format="mp3", **FIXED)
    assert mp3_headers["content-type"] == "audio/mpeg"
    assert len(pcm) < len(decode(mp3, "mp3")) <= len(pcm) + MP3_EXTRA_AT_MOST


def test_sentences_stream_one_after_another_with_the_whole_files_gap(client):
    two = ("This first sentence is long enough that it will not be merged with the one after it, "
           "whatever happens. And here is the second sentence, which follows it after a short pause.")
    both = 2 * SAMPLES + int(0.15 * 24_000)  # two clips and the silence between them
    assert len(decode(speak(client, input=two, response_format="flac", **FIXED)[1], "flac")) == both
    streamed = decode(speak(client, input=two, response_format="pcm", **FIXED)[1], "pcm")
    assert both - 2 * STREAM_DROPS_AT_MOST <= len(streamed) <= both


@pytest.mark.parametrize("fmt, extra", [("flac", {}), ("wav", {"stream": False}), ("mp3", {"stream": False}),
                                        ("pcm", {"stream": False})])
def test_whole_files_hold_exactly_the_clip_and_say_how_it_was_made(client, fmt, extra):
    headers, data = speak(client, response_format=fmt, **FIXED, **extra)
    assert len(decode(data, fmt)) == SAMPLES
    assert int(headers["content-length"]) == len(data)
    wall, first, rtf = (float(headers[f"x-chattts-{h}"]) for h in ("wall-s", "first-audio-s", "rtf"))
    assert first >= wall - 0.001 and wall > 0  # the first byte waits for the whole synthesis (3-decimal headers)
    assert rtf == pytest.approx(wall / (SAMPLES / 24_000), rel=0.01)
    assert headers["x-chattts-synthetic"] == "true"


def test_seed_voices_reproduce_differ_and_a_saved_card_speaks_with_its_voice(client, app_dir, app_url):
    whole = {**FIXED, "stream": False}  # sample for sample: a stream's seams follow its listener (see SEAM_BOUND)
    _, seven = speak(client, voice="seed:7", **whole)
    assert speak(client, voice="seed:7", **whole)[1] == seven
    assert speak(client, voice="seed:8", **whole)[1] != seven
    save_card(VoiceCard(name="narrator", seed=7), app_dir / "outputs" / "voices")
    assert speak(client, voice="narrator", **whole)[1] == seven
    with urllib.request.urlopen(app_url + "v1/audio/voices", timeout=60) as r:
        listed = json.loads(r.read())
    assert {"Aria", "narrator"} <= set(listed["voices"]) and {"wav", "mp3", "flac", "pcm"} <= set(listed["formats"])


def test_input_is_limited_to_4096_characters(client):
    text = ("The quick brown fox jumps over the lazy dog. " * 100)[:4096]
    headers, data = speak(client, input=text, response_format="wav", stream=False, max_new_token=4)
    assert len(decode(data, "wav")) > 0
    with pytest.raises(openai.BadRequestError) as err:
        speak(client, input=text + "x")
    assert err.value.body["message"] == "input is 4,097 characters; at most 4,096" and err.value.param == "input"


@pytest.mark.parametrize("request_args, param, sentence", [
    ({"speed": 10}, "speed", "invalid 'speed': Input should be less than or equal to 4 (got 10)"),
    ({"speed": 0.1}, "speed", "invalid 'speed': Input should be greater than or equal to 0.25 (got 0.1)"),
    ({"input": ""}, "input", "text is empty"),
    ({"voice": "Nobody"}, "voice", "unknown voice 'Nobody'"),
    ({"voice": "seed:x"}, "voice", "after 'seed:' comes a whole number"),
    ({"response_format": "opus"}, "response_format", "'opus' is not available here"),
    ({"stream_format": "sse"}, "stream_format", "invalid 'stream_format': Input should be 'audio'"),
    ({"extra_body": {"max_new_token": 0}}, "max_new_token", "invalid 'max_new_token'"),
])
def test_every_refusal_is_an_openai_error_the_client_shows(client, request_args, param, sentence):
    args = {"model": "tts-1", "voice": "Aria", "input": "Hello.", **request_args}
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(**args)
    assert sentence in err.value.body["message"] and sentence in str(err.value)
    assert err.value.type == "invalid_request_error" and err.value.param == param


def raw(app_url: str, path: str, body: bytes | None = None, method: str = "POST") -> tuple[int, dict]:
    req = urllib.request.Request(app_url + path.lstrip("/"), data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("path, body, method, status, sentence", [
    ("/v1/audio/speech", b"{not json", "POST", 400, "the request body is not valid JSON"),
    ("/v1/audio/speech", b"{}", "POST", 400, "'input' is required"),
    ("/v1/audio/speech", b"[1, 2]", "POST", 400, "the request body must be a JSON object"),
    ("/v1/audio/speech", None, "GET", 405, "/v1/audio/speech takes POST only"),
    ("/v1/models", None, "GET", 404, "no route /v1/models; this server offers POST /v1/audio/speech"),
])
def test_malformed_requests_get_openai_errors_too(app_url, path, body, method, status, sentence):
    code, answer = raw(app_url, path, body, method)
    assert code == status and sentence in answer["error"]["message"], answer
    assert answer["error"]["type"] == "invalid_request_error"


def test_the_route_asks_for_the_key_before_reading_the_body(tmp_path):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from chattts_lab.serve.context import AppContext
    from chattts_lab.serve.policy import ServingPolicy
    from chattts_lab.serve.openai_api import install, speech_router

    app = FastAPI()
    install(app, speech_router(AppContext(ServingPolicy(model="synthetic-tiny", auth="ann:s3cret"), outputs_dir=tmp_path)))
    http = TestClient(app)
    for headers in ({}, {"Authorization": "Bearer ann:wrong"}):
        for answer in (http.get("/v1/audio/voices", headers=headers),
                       http.post("/v1/audio/speech", json={"speed": 10}, headers=headers)):
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "invalid_api_key"
    assert http.get("/v1/audio/voices", headers={"Authorization": "Bearer ann:s3cret"}).status_code == 200
