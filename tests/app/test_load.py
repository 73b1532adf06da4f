"""Load through the real app: concurrent users sharing batched generations, and memory over many requests.

The load tests report how many requests were served, failed and lost; lost must be zero. Timings are
never asserted (the machine is shared); only counts, batch sizes, exact audio lengths and the steady growth
of memory are.
Run with `-rP` (or `-s`) to see the report and the RSS curve in the output.
"""

from __future__ import annotations

import threading
import urllib.parse

import pytest
import soundfile as sf

from tests.conftest import start_app, stop_app
from tests.support.reliability_helpers import ascii_curve, rss_mb, server_pid, steady_growth_mb

SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=12, split=False)
USERS = 8
JOB_DEADLINE_S = 600  # generous: the cores are shared; a job with no answer by then counts as lost


@pytest.fixture(scope="module")
def batching_app(tmp_path_factory):
    """An app whose batches hold 4 requests and wait for company as long as it takes: each batch runs the moment
    its fourth request arrives, so which requests share a batch is certain on any machine."""
    tmp = tmp_path_factory.mktemp("batching")
    url, proc = start_app(tmp, "--batching", "request", "--max-batch", "4", "--max-wait-ms", "600000")
    yield url, tmp
    stop_app(proc)


def _submit(url: str, text: str):
    from gradio_client import Client

    return Client(url, verbose=False).submit(text, "Aria", *SYNTH.values(), api_name="/synthesize")


def test_eight_users_at_once_share_batches_and_a_bad_request_fails_alone(batching_app):
    url, _ = batching_app
    jobs = [_submit(url, f"User {i + 1} asks for this sentence.") for i in range(USERS)]
    bad = _submit(url, " \n ")  # nothing to speak: refused alone, before it could join a batch
    served, failed, lost, batches = [], [], [], []
    for i, job in enumerate(jobs):
        try:
            path, m = job.result(timeout=JOB_DEADLINE_S)
            assert sf.info(path).frames > 0 and m["tokens"][0] > 0
            served.append(i + 1)
            batches.append(m["batch_requests"])
        except TimeoutError:
            lost.append(i + 1)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            failed.append((i + 1, repr(exc)[:200]))
    report = f"load: {USERS} concurrent users -> served {len(served)}, failed {len(failed)}, lost {len(lost)}"
    print(report, "batch sizes:", batches)
    assert (len(served), failed, lost) == (USERS, [], []), report
    assert batches == [4] * USERS, f"8 users should make two full batches of 4: {batches}"
    with pytest.raises(Exception, match="empty|nothing to speak"):
        bad.result(timeout=JOB_DEADLINE_S)


def test_streams_in_one_batch_are_each_their_own_and_a_hang_up_stops_only_its_own(batching_app):
    """Four OpenAI-route streams share one batch; one client hangs up after its first bytes. The others still
    get their whole clips (exact lengths), and the server stops only the abandoned one short."""
    url, tmp = batching_app
    tokens = 384
    body = {"model": "tts-1", "voice": "Aria", "response_format": "pcm", "seed": 3,
            "min_new_token": tokens, "max_new_token": tokens}
    results: dict[int, tuple[dict, int]] = {}

    def listen(i: int) -> None:
        import httpx

        with httpx.stream("POST", url + "v1/audio/speech", json={**body, "input": f"Listener {i} hears this."},
                          timeout=JOB_DEADLINE_S) as response:
            if i == 0:  # the one who hangs up
                next(response.iter_bytes())
                results[i] = (dict(response.headers), -1)
                return
            results[i] = (dict(response.headers), len(response.read()))

    threads = [threading.Thread(target=listen, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOB_DEADLINE_S)
    assert sorted(results) == [0, 1, 2, 3]
    assert {h["x-chattts-batch-requests"] for h, _ in results.values()} == {"4"}
    whole = (2 * tokens - 1) * 256 * 2  # 16-bit samples
    for i in (1, 2, 3):  # ChatTTS's stream drops near-silent samples: on noise a handful
        assert whole - whole // 100 <= results[i][1] <= whole, f"listener {i} got {results[i][1]} of {whole} bytes"
    log = (tmp / f"app-{urllib.parse.urlsplit(url).port}.log").read_text()
    stopped = [line for line in log.splitlines() if "the client hung up" in line]
    assert len(stopped) == 1, log[-2000:]
    assert int(stopped[0].split("after ")[1].split()[0]) < tokens


def _rss_curve(app_url: str, requests: int, every: int) -> list[float]:
    from gradio_client import Client

    pid = server_pid(app_url)
    client = Client(app_url, verbose=False)
    for _ in range(5):  # allocator pools, caches and lazily mapped weights settle first
        client.predict("Leak check.", "Aria", *{**SYNTH, "max_new_token": 4}.values(), api_name="/synthesize")
    curve = [rss_mb(pid)]
    for i in range(requests):
        client.predict(f"Leak check {i}.", "Aria", *{**SYNTH, "max_new_token": 4}.values(), api_name="/synthesize")
        if (i + 1) % every == 0:
            curve.append(rss_mb(pid))
    print(f"app RSS every {every} requests over {requests} requests:\n{ascii_curve(curve)}")
    return curve


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: memory over many requests: test_engine_reliability's flat memory
def test_app_memory_stays_flat_over_60_requests(app_url):
    """The default run's short version (about 2 s a request on two busy cores); -m slow runs 400."""
    curve = _rss_curve(app_url, 60, 10)
    growth = steady_growth_mb(curve)  # 0.4 MB a request (far below one request's buffers) would read 4
    assert growth < 4, f"app RSS grows {growth:.1f} MB every 10 requests: {[round(c) for c in curve]}"


@pytest.mark.slow
def test_app_memory_stays_flat_over_400_requests(app_url):
    curve = _rss_curve(app_url, 400, 20)
    growth = steady_growth_mb(curve)
    assert growth < 4, f"app RSS grows {growth:.1f} MB every 20 requests: {[round(c) for c in curve]}"


def test_a_soak_tells_a_leak_from_buffers_reaching_their_size():
    from bench.serving.loadtest import rss_figures

    warmed = rss_figures([1000.0, 1400.0, 1400.0, 1400.0, 1401.0])  # grows once, early, then flat
    assert warmed["rss_growth_pct"] == pytest.approx(40.1) and warmed["rss_late_growth_pct"] < 0.1
    leaking = rss_figures([1000.0, 1100.0, 1200.0, 1300.0, 1400.0])
    assert leaking["rss_late_growth_pct"] == pytest.approx(100 * 200 / 1200)
