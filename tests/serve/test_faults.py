"""The app under what listeners do: hang up at any moment, arrive all at once, leave while others listen, send a
voice that fails inside a running batch. The real app over real HTTP on tiny synthetic weights (lab fp32), once per
scheduling (continuous batching and request-level batching), and on onnx int4 batching continuously, with small bounds
so that a burst is small too.

Every check is on lengths and statuses: a clip of N audio tokens (`min_new_token == max_new_token == N`) streamed
as pcm is exactly (2N-1)*256 16-bit samples, so a stream cut short cannot pass as whole. No clocks: "while busy" is
"while a stream of 2,048 tokens is open" (seconds of generation, far longer than a burst takes to send), and a
burst's accepted requests hold their rows until the test lets them go, so the count of refusals does not depend on
how fast anything runs.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse

import httpx
import pytest

from chattts_lab.voices import VoiceCard, save_card
from tests.conftest import TINY, start_app, stop_app

N = 24  # audio tokens of a short clip
LONG_N = 2048  # a clip that outlasts anything a test does meanwhile (it is always hung up on)
ROWS = QUEUE = 1  # continuous: rows generating at once; both schedulings: requests that may wait beyond them
BATCH = 1  # request-level: texts in one batched generation
BOUND = {"continuous": ROWS + QUEUE, "request": BATCH + QUEUE}  # requests accepted at most while all are held
HANG_UPS = ("before_first_chunk", "mid_stream", "at_last_chunk")


def body(n: int = N, **extra) -> dict:
    return {"model": "tts-1", "input": "Hello, listener.", "response_format": "pcm", "seed": 1,
            "min_new_token": n, "max_new_token": n, **extra}


def pcm_bytes(n: int) -> int:
    """A whole clip of n tokens as 16-bit pcm."""
    return (2 * n - 1) * 256 * 2


# ---- the library: a stop belongs to the call it was asked of


def stream_acting_at_first_chunk(model, request, act, **kwargs):
    """Stream `request`, calling `act()` when its first chunk arrives; the final SynthesisOutput's measurements.
    Consumed on the torch thread, where the stream's generator runs in step with its consumer (no other thread
    races ahead), so the stop comes at the first chunk, whatever the machine's speed."""
    from chattts_lab import synthesize_stream, torch_thread
    from chattts_lab.synthesis import SynthesisOutput

    def consume():
        acted = False
        for item in synthesize_stream(model, request, **kwargs):
            if isinstance(item, SynthesisOutput):
                return item.measurements
            if not acted:
                act()
                acted = True

    return torch_thread.run(consume)


@pytest.mark.parametrize("engine", ["lab", "stock", "onnx"])
def test_a_stop_ends_its_own_stream_and_leaves_nothing_set_for_the_next(engine):
    """Lab streaming runs its own loop (not ChatTTS's `infer`, which clears ChatTTS's model-wide stop flag as it
    starts), and so does onnx (its session inside the lab's loop); stock streams through `infer`. On each, a stopped
    stream is marked interrupted with the reason, and the next call on the same model is whole."""
    from chattts_lab import LoadConfig, SynthesisRequest, load_model, synthesize
    from chattts_lab.synthesis import STOPPED_BY_CALLER

    model = load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1, engine=engine))
    request = SynthesisRequest.of("Hello, listener.", min_new_token=96, max_new_token=96)
    stop = threading.Event()
    stopped = stream_acting_at_first_chunk(model, request, stop.set, stop=stop)  # the listener leaves
    assert stopped.interrupted and stopped.interrupted_reason == STOPPED_BY_CALLER and stopped.tokens[0] < 96
    after = stream_acting_at_first_chunk(model, request, lambda: None)
    assert after.tokens == [96] and not after.interrupted and after.interrupted_reason is None
    whole = synthesize(model, request)
    assert whole.measurements.tokens == [96] and not whole.measurements.interrupted


def test_interrupt_marks_the_running_call_with_its_reason_and_no_later_one():
    from chattts_lab import LoadConfig, SynthesisRequest, interrupt, load_model
    from chattts_lab.synthesis import INTERRUPT_CALLED

    model = load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1, engine="lab"))
    request = SynthesisRequest.of("Hello, listener.", min_new_token=96, max_new_token=96)
    interrupt(model)  # nothing runs: no later call may see it, nor code that calls ChatTTS directly
    assert not model.chat.context.get()
    stopped = stream_acting_at_first_chunk(model, request, lambda: interrupt(model))
    assert stopped.interrupted and stopped.interrupted_reason == INTERRUPT_CALLED and stopped.tokens[0] < 96
    after = stream_acting_at_first_chunk(model, request, lambda: None)
    assert after.tokens == [96] and not after.interrupted


# ---- the app over HTTP


# The apps under test: (engine, precision, scheduling, whether --batching asks for it or it is the app's default).
# Lab under each scheduling; onnx int4 (the fastest configuration on AVX2-only CPUs) as the app serves it unasked,
# continuously: its rows are the lab's, its KV cache bound to the ONNX Runtime session. Stock is not here: ChatTTS's
# own stream drops near-silent samples, so its clips have no exact length to check; its stops are held above (the
# library, every engine) and over HTTP on Ray Serve's request-level replicas (tests/serve/test_ray_serve.py).
APPS = {"lab-continuous": ("lab", "fp32", "continuous", True), "lab-request": ("lab", "fp32", "request", True),
        "onnx-int4-continuous": ("onnx", "int4", "continuous", False)}


@pytest.fixture(scope="module", params=list(APPS))
def app(request, tmp_path_factory):
    """One app per entry of APPS, shared by the tests of this file: (url, scheduling, app folder)."""
    engine, precision, scheduling, asked = APPS[request.param]
    folder = tmp_path_factory.mktemp(f"faults-{request.param}")
    batching = ["--batching", scheduling] if asked else []
    url, proc = start_app(folder, "--engine", engine, "--precision", precision, "--threads", "1", *batching,
                          "--max-rows", str(ROWS), "--max-queue", str(QUEUE), "--max-batch", str(BATCH))
    yield url, scheduling, folder
    stop_app(proc)


def speech_url(app) -> str:
    return app[0] + "v1/audio/speech"


def app_log(app) -> str:
    url, _, folder = app
    return (folder / f"app-{urllib.parse.urlsplit(url).port}.log").read_text()


def hang_ups_logged(app) -> int:
    return app_log(app).count("the client hung up")


def wait_for_hang_ups(app, count: int, deadline_s: float = 300) -> None:
    """Until the app has logged `count` hang-ups (a stream it stopped). Polls: only a stream that is never stopped
    reaches the deadline (a 2,048-token clip is then generated whole, and its hang-up is not logged)."""
    end = time.monotonic() + deadline_s
    while hang_ups_logged(app) < count:
        assert time.monotonic() < end, f"the app did not stop the abandoned stream:\n{app_log(app)[-3000:]}"
        time.sleep(0.2)


def streamed(app, n: int = N, **extra) -> tuple[int, int, dict]:
    """(status, bytes received, headers) of one streamed request read to its end."""
    with httpx.stream("POST", speech_url(app), json=body(n, **extra), timeout=600) as r:
        return r.status_code, sum(len(b) for b in r.iter_bytes()), dict(r.headers)


def assert_served_whole(app, n: int = N) -> None:
    """A fresh request, streamed and whole, gets all of its audio."""
    status, got, headers = streamed(app, n)
    assert status == 200 and got == pcm_bytes(n), f"streamed {got} of {pcm_bytes(n)} bytes (status {status})"
    assert headers["x-chattts-scheduling"] == app[1]
    whole = httpx.post(speech_url(app), json=body(n, stream=False), timeout=600)
    assert whole.status_code == 200 and len(whole.content) == pcm_bytes(n)


def hang_up_before_first_chunk(app) -> None:
    """Send the request and close the connection before any answer (a raw socket: clients wait for headers)."""
    url = urllib.parse.urlsplit(app[0])
    data = json.dumps(body(LONG_N)).encode()
    with socket.create_connection((url.hostname, url.port), timeout=60) as s:
        s.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)


def hang_up_mid_stream(app) -> None:
    with httpx.stream("POST", speech_url(app), json=body(LONG_N), timeout=600) as r:
        assert r.status_code == 200
        assert len(next(r.iter_bytes())) > 0  # audio is flowing; leaving the block hangs up


def hang_up_at_last_chunk(app) -> None:
    """Take every byte of the clip, then close before the response's end (its closing chunk)."""
    with httpx.stream("POST", speech_url(app), json=body(N), timeout=600) as r:
        got = 0
        for data in r.iter_raw():
            got += len(data)
            if got >= pcm_bytes(N):
                break
        assert got == pcm_bytes(N)


@pytest.mark.parametrize("when", HANG_UPS)
def test_after_a_listener_hangs_up_the_next_request_is_served_whole(app, when):
    before = hang_ups_logged(app)
    {"before_first_chunk": hang_up_before_first_chunk, "mid_stream": hang_up_mid_stream,
     "at_last_chunk": hang_up_at_last_chunk}[when](app)
    if when != "at_last_chunk":  # the clip was made whole before that hang-up: there is nothing to stop
        wait_for_hang_ups(app, before + 1)
    for _ in range(2):  # and the one after that: no stop state lingers
        assert_served_whole(app)


def test_many_hang_ups_in_a_row_leave_later_streams_whole(app):
    before = hang_ups_logged(app)
    for i in range(3):
        hang_up_mid_stream(app)
        wait_for_hang_ups(app, before + i + 1)
    assert_served_whole(app)


class Burst:
    """`size` long streamed requests at once. Each accepted one reads its first audio, then holds its row (or its
    place in the queue) until `release()`; refusals are answered at once."""

    def __init__(self, app, size: int):
        self.app, self.released = app, threading.Event()
        self.statuses: list[tuple[int, dict, dict | None]] = []  # (status, headers, error) per answered request
        self.lock = threading.Lock()
        # Every request is sent at once: sent as each thread got going, on a loaded machine the last came seconds
        # after the first, and request-level batching had finished the first batch's generation by then (its rows
        # are free once generated, held stream or not), so it took one more than the bound.
        self.sending = threading.Barrier(size)
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(size)]

    def _one(self) -> None:
        with httpx.Client(timeout=600) as client:
            self.sending.wait(60)
            self._send(client)

    def _send(self, client: httpx.Client) -> None:
        with client.stream("POST", speech_url(self.app), json=body(LONG_N)) as r:
            error = json.loads(r.read())["error"] if r.status_code != 200 else None
            if r.status_code == 200:
                next(r.iter_bytes())
            with self.lock:
                self.statuses.append((r.status_code, dict(r.headers), error))
            if r.status_code == 200:
                self.released.wait(600)  # leaving the block then hangs up: the row frees for the next

    def refused(self) -> list[tuple[int, dict, dict]]:
        with self.lock:
            return [s for s in self.statuses if s[0] != 200]

    def run(self, expected_refusals: int, deadline_s: float = 120) -> None:
        for t in self.threads:
            t.start()
        end = time.monotonic() + deadline_s  # only reached when too few are refused (the test then fails)
        while len(self.refused()) < expected_refusals and time.monotonic() < end:
            time.sleep(0.1)
        self.released.set()  # the held ones hang up; those still queued are served in turn and hang up too
        for t in self.threads:
            t.join(600)


def test_a_burst_of_five_times_the_bound_is_refused_beyond_it(app):
    scheduling = app[1]
    size, bound = 5 * BOUND[scheduling], BOUND[scheduling]
    burst = Burst(app, size)
    burst.run(expected_refusals=size - bound)
    refused = burst.refused()
    assert len(burst.statuses) == size
    assert len(refused) >= size - bound, f"{size - len(refused)} of {size} accepted; at most {bound} may be"
    for status, headers, error in refused:
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert error["code"] == "overloaded" and error["type"] == "server_error"
    assert size - len(refused) >= 1  # the first of the burst always finds room
    assert_served_whole(app)


def test_a_hang_up_during_another_listeners_stream_leaves_that_stream_whole(app):
    """The other listener's request is sent while the leaver's 2,048-token stream is open; continuous batching
    streams both at once (the leaver hangs up mid-way through the other's stream), request-level batching runs the
    other after the leaver's batch, which the hang-up ends."""
    url, scheduling, _ = app
    n = 96
    result: dict = {}
    other_started = threading.Event()

    def other() -> None:
        with httpx.stream("POST", speech_url(app), json=body(n), timeout=600) as r:
            chunks = r.iter_bytes()
            got = len(next(chunks, b""))
            other_started.set()
            got += sum(len(b) for b in chunks)
            result.update(status=r.status_code, got=got)

    with httpx.stream("POST", speech_url(app), json=body(LONG_N), timeout=600) as leaver:
        assert leaver.status_code == 200 and len(next(leaver.iter_bytes())) > 0
        thread = threading.Thread(target=other, daemon=True)
        thread.start()
        if scheduling == "continuous":  # both rows generate: the hang-up comes while the other streams
            assert other_started.wait(300)
    thread.join(600)
    assert result == {"status": 200, "got": pcm_bytes(n)}
    assert_served_whole(app)


def test_a_row_failing_inside_a_running_batch_fails_alone(app):
    """A voice card whose sample-audio code is garbage passes the request's checks and fails when its prompt is
    built, inside the running generation (continuous batching admits it into a free row while another streams)."""
    url, scheduling, folder = app
    if scheduling != "continuous":
        pytest.skip("request-level batching fails a batch as a whole (docs/serving.md); rows fail alone in the loop")
    save_card(VoiceCard(name="broken", sample_audio_code="not a sample-audio code", sample_text="Hello."),
              folder / "outputs" / "voices")
    n = 256
    with httpx.stream("POST", speech_url(app), json=body(n), timeout=600) as listener:
        assert listener.status_code == 200
        chunks = listener.iter_bytes()
        got = len(next(chunks))
        broken = httpx.post(speech_url(app), json=body(N, voice="broken"), timeout=600)
        got += sum(len(b) for b in chunks)
    assert broken.status_code >= 500 and broken.json()["error"]["type"] == "server_error", broken.text
    assert got == pcm_bytes(n)
    assert_served_whole(app)


# ---- a stream that ends early for any other reason ends abnormally


def test_the_app_stopped_mid_stream_ends_the_stream_abnormally(tmp_path):
    """An operator stops the app (SIGTERM) while a listener streams: the listener's read fails, never a short clip
    that ends like a whole one."""
    url, proc = start_app(tmp_path, "--engine", "lab", "--precision", "fp32", "--threads", "1")
    try:
        with httpx.stream("POST", url + "v1/audio/speech", json=body(LONG_N), timeout=600) as r:
            chunks = r.iter_bytes()
            assert r.status_code == 200 and len(next(chunks)) > 0
            proc.terminate()
            with pytest.raises(httpx.TransportError):  # RemoteProtocolError: an incomplete chunked read
                for _ in chunks:
                    pass
    finally:
        stop_app(proc)


def test_a_stream_interrupted_by_anyone_but_its_listener_ends_abnormally(tmp_path):
    """The /v1 route served in this process (uvicorn, real HTTP) on the app's own synthesis path, request-level lab
    streaming; `chattts_lab.interrupt(model)` stops the generation while the listener still reads. The stream's end
    must tell the listener that its clip is cut: the connection is reset after the server logs why. A whole file
    interrupted while it is made is a 503 saying why."""
    import uvicorn
    from fastapi import FastAPI

    from chattts_lab import interrupt
    from bench.serving.loadtest import free_port
    from chattts_lab.synthesis import INTERRUPT_CALLED, CallStop
    from chattts_lab.serve import speech
    from chattts_lab.serve.context import AppContext
    from chattts_lab.serve.policy import ServingPolicy
    from chattts_lab.serve.openai_api import install, speech_router
    from chattts_lab.serve.runtime import RuntimeSettings, ServingChoice

    settings = RuntimeSettings("cpu", "fp32", 1, "lab")
    ctx = AppContext(ServingPolicy(model=TINY, batching="request"), outputs_dir=tmp_path, serving=ServingChoice(settings, "test"))
    model = speech.get_model(ctx, settings)  # loaded and warmed up before the request
    app = FastAPI()
    install(app, speech_router(ctx))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/audio/speech", json=body(LONG_N), timeout=600) as r:
            chunks = r.iter_bytes()
            assert r.status_code == 200 and len(next(chunks)) > 0
            interrupt(model)  # 2,048 tokens take seconds: the generation is running
            with pytest.raises(httpx.TransportError):
                for _ in chunks:
                    pass
        whole = httpx.post(f"http://127.0.0.1:{port}/v1/audio/speech", json=body(N), timeout=600)
        assert whole.status_code == 200 and len(whole.content) == pcm_bytes(N)  # and the next is whole
        # a whole file interrupted while it is made is an error status, never a 200 with a short clip
        answer: dict = {}
        thread = threading.Thread(target=lambda: answer.update(r=httpx.post(
            f"http://127.0.0.1:{port}/v1/audio/speech", json=body(LONG_N, stream=False), timeout=600)))
        thread.start()
        while not isinstance(model.chat.context, CallStop):  # its call has begun: its own stop flag is in place
            assert thread.is_alive()
            time.sleep(0.01)
        interrupt(model)
        thread.join(600)
        error = answer["r"].json()["error"]
        assert answer["r"].status_code == 503 and error["code"] == "interrupted", error
        assert INTERRUPT_CALLED in error["message"]
    finally:
        server.should_exit = True
        thread.join(60)
