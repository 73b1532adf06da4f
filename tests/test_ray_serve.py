"""The app's /v1/audio/speech on Ray Serve: two Synthesizer replicas on a local Ray cluster of two nodes.

`python -m webui.rayserve --cluster ray:ADDRESS --replicas 2 --model synthetic-tiny --max-batch 2` deploys and
returns once both replicas are ready (one per node: each asks for its one CPU). Every batch a replica starts
writes what it runs into a folder and, while that folder holds no `release` file, waits (chattts_lab.cluster's
HOLD_DIR_VAR, set on both nodes), so one replica is killed while its batch surely runs there. One cluster and one
deployment serve every test here (Ray starts slowly). Audio of random weights is noise, but its length is exact:
N audio tokens are (2N-1)*256 samples at 24 kHz.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")
from ray.cluster_utils import Cluster  # noqa: E402

from chattts_lab.cluster import HOLD_DIR_VAR  # noqa: E402
from chattts_lab.serving import ServeFinished, ServeSpec, free_port, run_serving  # noqa: E402
from chattts_lab.spec import SpecError  # noqa: E402
from tests.conftest import ROOT, TINY  # noqa: E402
from webui.rayserve import parse_args, plan_from_args  # noqa: E402

N = 4  # audio tokens per clip
SAMPLES = (2 * N - 1) * 256
STREAM_DROPS_AT_MOST = SAMPLES // 20  # ChatTTS's stream drops near-silent samples; on noise a handful
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")  # no digits: the normaliser
WAIT_S = 300  # an upper bound for a slow shared machine, never a synchronisation: each wait ends on its condition


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(URL, hold folder) of the deployment on a fresh two-node cluster, the hold released."""
    tmp = tmp_path_factory.mktemp("rayserve")
    hold = tmp / "hold"
    hold.mkdir()
    (hold / "release").touch()
    cluster = None
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(HOLD_DIR_VAR, str(hold))  # the nodes' processes, the replicas among them, inherit it
            # Ray's memory monitor is off: on a machine whose memory other work fills, it would kill the replicas.
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "include_dashboard": False, "_system_config": {"memory_monitor_refresh_ms": 0}})
            cluster.add_node(num_cpus=1)
        port = free_port()
        deployed = subprocess.run(
            [sys.executable, "-m", "webui.rayserve", "--cluster", f"ray:{cluster.address}", "--replicas", "2",
             "--model", TINY, "--threads", "1", "--max-batch", "2", "--no-warm-up", "--port", str(port)],
            cwd=ROOT, env=dict(os.environ, CHATTTS_LAB_OUTPUTS=str(tmp / "outputs")), capture_output=True,
            text=True, timeout=WAIT_S)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert f"at http://127.0.0.1:{port}/v1/audio/speech" in deployed.stdout
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)  # to kill a replica
        yield f"http://127.0.0.1:{port}/", hold
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


def speak(url: str, word: str, stream: bool = False, **extra) -> httpx.Response:
    body = {"model": "tts-1", "input": f"Request {word}.", "voice": "Aria", "stream": stream,
            "response_format": "pcm" if stream else "wav", "min_new_token": N, "max_new_token": N, **extra}
    return httpx.post(url + "v1/audio/speech", json=body, timeout=WAIT_S)


def samples(response: httpx.Response) -> int:
    """Samples of a valid 24 kHz clip (whole wav files are decoded; streamed pcm is 16-bit samples)."""
    if response.headers["content-type"].startswith("audio/wav"):
        audio, rate = sf.read(io.BytesIO(response.content), dtype="int16")
        assert rate == 24_000
        return len(audio)
    return len(np.frombuffer(response.content, dtype="<i2"))


def notes(hold: Path, pattern: str, seen: set[Path]) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(set(hold.glob(pattern)) - seen)]


def texts_noted(hold: Path, pattern: str, seen: set[Path], replica: str) -> set[str]:
    return {t for note in notes(hold, pattern, seen) if note["replica"] == replica for t in note["texts"]}


def words_in(texts) -> set[str]:
    return {w for w in WORDS if any(w in t for t in texts)}


def wait_until(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S} s"
        time.sleep(0.05)  # polling files the replicas write: the condition itself, however long it takes
    return value


def test_eight_concurrent_requests_are_all_served_with_valid_audio(served):
    url, _ = served
    with ThreadPoolExecutor(8) as pool:  # half whole wav files, half streamed pcm
        answers = list(pool.map(lambda k: speak(url, WORDS[k], stream=k % 2 == 1), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text[:300] for a in answers if a.status_code != 200]
    for k, answer in enumerate(answers):
        if k % 2 == 0:
            assert samples(answer) == SAMPLES
        else:
            assert SAMPLES - STREAM_DROPS_AT_MOST <= samples(answer) <= SAMPLES
        assert answer.headers["x-chattts-synthetic"] == "true"
        assert answer.headers["x-chattts-config"] == "stock, fp32, cpu, 1 threads, 2 Ray Serve replicas"
        assert 1 <= int(answer.headers["x-chattts-batch-requests"]) <= 2  # --max-batch 2


def test_a_killed_replica_fails_only_the_requests_it_was_running_and_says_so(served):
    url, hold = served
    seen = set(hold.iterdir())
    (hold / "release").unlink()  # from now on every batch holds once started
    with ThreadPoolExecutor(8) as pool:
        answers = {word: pool.submit(speak, url, word) for word in WORDS}
        try:
            # Nothing ends while batches hold, and a replica takes at most 2 x --max-batch requests: 4 each, of
            # which its batch runs 2 at most; the others wait in it.
            wait_until(lambda: len(notes(hold, "accepted-*", seen)) == 8, "both replicas taking 4 requests")
            victim = wait_until(lambda: notes(hold, "*.running", seen), "a replica's batch starting")[0]
            replica = victim["actor"]
            running = words_in(victim["texts"])
            waiting = words_in(texts_noted(hold, "accepted-*", seen, replica)) - running
            assert running and len(running) + len(waiting) == 4, (running, waiting)
            wait_until(lambda: running <= words_in(texts_noted(hold, "started-*", seen, replica)),
                       "the ingress hearing where they run")
            ray.kill(ray.get_actor(replica, namespace="serve"), no_restart=True)
            for word in running:  # they fail while the other replica still holds its batch
                failed = answers[word].result(timeout=WAIT_S)
                assert failed.status_code == 503, failed.text
                error = failed.json()["error"]
                assert error["code"] == "replica_died" and error["type"] == "server_error"
                assert error["message"].startswith(f"the replica that was synthesizing this request ({replica}) died")
        finally:
            (hold / "release").touch()  # whatever happened, the held batches go on (and the pool can end)
        served_ok = {w: answers[w].result(timeout=WAIT_S) for w in WORDS if w not in running}
    # The ones that waited on the killed replica went to another, like the rest.
    assert {w: r.status_code for w, r in served_ok.items()} == dict.fromkeys(served_ok, 200)
    assert all(samples(r) == SAMPLES for r in served_ok.values())


def test_a_bad_request_is_refused_by_the_same_route_in_openais_shape(served):
    url, _ = served
    answer = speak(url, "alpha", voice="nobody-saved-this")
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "voice"
    answer = httpx.post(url + "v1/audio/speech", json={"voice": "Aria"}, timeout=WAIT_S)
    assert answer.status_code == 400 and answer.json()["error"]["message"] == "'input' is required"
    assert "Aria" in httpx.get(url + "v1/audio/voices", timeout=WAIT_S).json()["voices"]


def test_the_serving_benchmark_measures_the_deployment(served, tmp_path):
    url, _ = served
    spec = ServeSpec(url=url, users=(2,), requests_per_user=1, max_batches=(0,), tokens=N)
    (finished,) = [e for e in run_serving(spec, tmp_path / "lab.sqlite") if isinstance(e, ServeFinished)]
    (level,) = finished.summaries
    assert finished.status == "finished" and level["ok"] == 2 and level["errors"] == level["lost"] == 0
    assert level["config"] == "stock, fp32, cpu, 1 threads, 2 Ray Serve replicas"


def test_each_replica_asks_ray_for_its_threads_cpus_or_one_gpu():
    """No cluster needed: the placement and the refusals are decided before anything is deployed."""
    plan = plan_from_args(parse_args(["--replicas", "3", "--threads", "4", "--max-batch", "8"]))
    assert plan.replica_options() == {"num_replicas": 3, "max_ongoing_requests": 16,
                                      "ray_actor_options": {"num_cpus": 4, "num_gpus": 0}}
    on_gpus = plan_from_args(parse_args(["--device", "cuda", "--replicas", "2"]))  # judged by the replicas' machines
    assert on_gpus.replica_options()["ray_actor_options"] == {"num_cpus": 1, "num_gpus": 1}
    with pytest.raises(SpecError, match="replicas must be 1..1024, got 0"):
        plan_from_args(parse_args(["--replicas", "0"]))
    with pytest.raises(SpecError, match="cannot serve turbo · fp32 · cpu · 1 thread: unknown engine 'turbo'"):
        plan_from_args(parse_args(["--engine", "turbo"]))
