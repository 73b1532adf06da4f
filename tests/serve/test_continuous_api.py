"""The app's `/v1/audio/speech` under continuous batching (the real app, tiny weights, one row, no queue): every
response says which scheduling ran, a request beyond the rows and the queue is refused at once with 503 and
Retry-After, and a client that hangs up frees its row for the next request. No clocks: "while busy" is "while a
stream of 2,048 tokens is open", which outlasts any request made meanwhile."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import start_app, stop_app

LONG = {"model": "tts-1", "input": "A long clip, streamed.", "response_format": "pcm", "seed": 1,
        "min_new_token": 2048, "max_new_token": 2048}
SHORT = {"model": "tts-1", "input": "Me too, please.", "response_format": "pcm", "min_new_token": 8,
         "max_new_token": 8}


@pytest.fixture(scope="module")
def one_row_app(tmp_path_factory):
    url, proc = start_app(tmp_path_factory.mktemp("one-row"), "--batching", "continuous", "--max-rows", "1",
                          "--max-queue", "0")
    yield url
    stop_app(proc)


def test_beyond_the_rows_and_the_queue_a_request_gets_503_at_once_and_a_hang_up_frees_the_row(one_row_app):
    speech = one_row_app + "v1/audio/speech"
    with httpx.stream("POST", speech, json=LONG, timeout=600) as long:
        assert long.status_code == 200 and long.headers["x-chattts-scheduling"] == "continuous"
        audio = long.iter_bytes()  # kept: an abandoned iterator closes the response, which is a hang-up
        assert len(next(audio)) > 0  # its row is generating
        refused = httpx.post(speech, json=SHORT, timeout=600)
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "overloaded" and "at capacity" in error["message"]
    # the client hung up: its row frees at the server's next step, so a client that honours Retry-After is served
    for _ in range(60):
        served = httpx.post(speech, json=SHORT, timeout=600)
        if served.status_code != 503:
            break
        time.sleep(int(served.headers["retry-after"]))
    assert served.status_code == 200 and served.headers["x-chattts-scheduling"] == "continuous"
    assert len(served.content) == (2 * 8 - 1) * 256 * 2  # 8 tokens, 16-bit samples
