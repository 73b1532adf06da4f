"""The app's /v1/audio/speech on Ray Serve: two Synthesizer replicas on conftest's `ray_cluster` (started as the
README starts one: `ray start` in subprocesses, two nodes, token authentication on).

`python -m chattts_lab.serve.rayserve --cluster ray:ADDRESS --replicas 2 --model synthetic-tiny --max-batch 2` deploys and
returns once both replicas are ready (one per node: each asks for its one CPU); `--stop` takes it down. A replica
is killed while its batch runs, known from the replicas' own Serve logs, where each line carries its request's id
(sent as X-Request-ID): a request waits for a batch, then starts in one of N requests. Long clips (LONG tokens) keep
the batch running for seconds, so the kill usually lands while it runs; what it cut is judged from the answers.
Audio of random weights is noise, but its length is exact: N audio tokens are (2N-1)*256 samples at 24 kHz.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import soundfile as sf

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")

from chattts_lab.engines import REFERENCE  # noqa: E402
from chattts_lab.ray_connect import connect  # noqa: E402
from bench.serving.loadtest import ServeFinished, ServeSpec, free_port, run_serving  # noqa: E402
from chattts_lab.sweep.spec import SpecError  # noqa: E402
from tests.conftest import ROOT, TINY  # noqa: E402
from tests.support.ray_cli import WAIT_S  # noqa: E402
from chattts_lab.serve.rayserve import parse_args, plan_from_args  # noqa: E402

N = 4  # audio tokens per clip
LONG = 96  # per clip of the requests of which a replica is killed: a batch of two such clips runs for seconds
# a listener who hangs up after the first audio: long enough that the hang-up reaches the replica before the clip
# could end on its own, however loaded the machine (at LONG, a fresh clone's run once saw the clip end first, and the
# replica rightly logged no hang-up); the rows stop at the hang-up, so the length costs nothing when it works
HANG_UP_TOKENS = 1024
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")  # no digits: the normaliser
REPLICA_LOG = "serve/replica_chattts_*.log"  # the Synthesizer replicas' and the SpeechIngress's
STOPPED: list[bool] = []  # test_stop_takes_the_application_down ran `--stop`


def samples_of(tokens: int) -> int:
    return (2 * tokens - 1) * 256


def rayserve(cluster, *args: str, outputs=None) -> subprocess.CompletedProcess:
    env = dict(cluster.client_env, **({"CHATTTS_LAB_OUTPUTS": str(outputs)} if outputs else {}))
    return subprocess.run([sys.executable, "-m", "chattts_lab.serve.rayserve", "--cluster", f"ray:{cluster.address}", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=WAIT_S)


@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory):
    """The deployment's URL; taken down (`--stop`) after the file's tests if the last test did not."""
    port = free_port()
    deployed = rayserve(ray_cluster, "--replicas", "2", "--model", TINY, "--threads", "1", "--max-batch", "2",
                        "--engine", REFERENCE[0], "--precision", REFERENCE[1], "--no-warm-up", "--port", str(port), outputs=tmp_path_factory.mktemp("rayserve") / "outputs")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert f"at http://127.0.0.1:{port}/v1/audio/speech" in deployed.stdout
    connect(f"ray:{ray_cluster.address}")  # this process's own connection, to kill a replica
    yield f"http://127.0.0.1:{port}/"
    if not STOPPED:
        rayserve(ray_cluster, "--stop")


def speak(url: str, word: str, stream: bool = False, tokens: int = N, request_id: str | None = None,
          **extra) -> httpx.Response:
    body = {"model": "tts-1", "input": f"Request {word}.", "voice": "Aria", "stream": stream,
            "response_format": "pcm" if stream else "wav", "min_new_token": tokens, "max_new_token": tokens, **extra}
    headers = {"X-Request-ID": request_id} if request_id else {}
    return httpx.post(url + "v1/audio/speech", json=body, headers=headers, timeout=WAIT_S)


def samples(response: httpx.Response) -> int:
    """Samples of a valid 24 kHz clip (whole wav files are decoded; streamed pcm is 16-bit samples)."""
    if response.headers["content-type"].startswith("audio/wav"):
        audio, rate = sf.read(io.BytesIO(response.content), dtype="int16")
        assert rate == 24_000
        return len(audio)
    return len(np.frombuffer(response.content, dtype="<i2"))


def hang_up_mid_stream(url: str, cluster, word: str) -> None:
    """A long streamed request whose listener leaves after the first audio; returns once the replica that ran it
    has logged that its rows stop (its Serve log line carries the request's id)."""
    request_id = f"leave-{word}-{uuid.uuid4().hex[:8]}"
    body = {"model": "tts-1", "input": f"Request {word}.", "voice": "Aria", "stream": True, "response_format": "pcm",
            "min_new_token": HANG_UP_TOKENS, "max_new_token": HANG_UP_TOKENS}
    with httpx.stream("POST", url + "v1/audio/speech", json=body, headers={"X-Request-ID": request_id},
                      timeout=WAIT_S) as r:
        assert r.status_code == 200
        assert len(next(r.iter_bytes())) > 0  # audio is flowing; leaving the block hangs up
    wait_until(lambda: any(request_id in line and "the caller left before its answer" in line
                           for line in cluster.log_lines(REPLICA_LOG)), f"a replica stopping {request_id}'s rows")


def replica_log(cluster, ids: dict[str, str]) -> dict[str, dict]:
    """word -> what the Serve logs say of its request: the replicas' {"waiting": [replica, ...], "started":
    [(replica, n), ...]} and the ingress's "running": [replica, ...], the starts it heard of (a request the ingress
    sent again has more than one of each; read file by file, so not in the order of time)."""
    seen: dict[str, dict] = {}
    by_id = {request_id: word for word, request_id in ids.items()}
    for line in cluster.log_lines(REPLICA_LOG):
        word = next((by_id[token] for token in line.split() if token in by_id), None)
        if word is None:
            continue
        said = seen.setdefault(word, {"waiting": [], "started": [], "running": []})
        if m := re.search(r"-- waiting for a batch on (\S+)", line):
            said["waiting"].append(m[1])
        elif m := re.search(r"-- started on (\S+) in a batch of (\d+) request", line):
            said["started"].append((m[1], int(m[2])))
        elif m := re.search(r"-- running on (\S+)", line):
            said["running"].append(m[1])
    return seen


def running_batch(cluster, ids: dict[str, str]):
    """(replica, words waiting in it) once every request waits in a replica and a replica that holds more than its
    batch has started that batch whole (as many of its requests logged as its size, each start heard by the
    ingress), else None. Six requests on two replicas of at most 4 each: one holds 3 or more, its batch 2 at most."""
    seen = replica_log(cluster, ids)
    if len([w for w in seen if seen[w]["waiting"]]) < len(ids):
        return None
    first_start = {w: said["started"][0] for w, said in seen.items() if said["started"]}
    for replica in {where for where, _ in first_start.values()}:
        batch = {w for w, (where, _) in first_start.items() if where == replica}
        waiting = {w for w, said in seen.items() if replica in said["waiting"]} - batch
        heard = all(replica in seen[w]["running"] for w in batch)
        if waiting and heard and len(batch) == first_start[next(iter(batch))][1]:
            return replica, waiting
    return None


def wait_until(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S} s"
        time.sleep(0.05)  # polling the replicas' logs: the condition itself, however long it takes
    return value


def test_eight_concurrent_requests_are_all_served_with_valid_audio(served):
    url, expected = served, samples_of(N)
    with ThreadPoolExecutor(8) as pool:  # half whole wav files, half streamed pcm
        answers = list(pool.map(lambda k: speak(url, WORDS[k], stream=k % 2 == 1), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text[:300] for a in answers if a.status_code != 200]
    for k, answer in enumerate(answers):
        if k % 2 == 0:
            assert samples(answer) == expected
        else:  # ChatTTS's stream drops near-silent samples; on noise a handful
            assert expected - expected // 20 <= samples(answer) <= expected
        assert answer.headers["x-chattts-synthetic"] == "true"
        assert answer.headers["x-chattts-config"] == "stock, fp32, cpu, 1 thread, 2 Ray Serve replicas"
        assert 1 <= int(answer.headers["x-chattts-batch-requests"]) <= 2  # --max-batch 2


def kill_a_replica_while_its_batch_runs(url: str, cluster) -> tuple[str, set, dict, dict]:
    """Six long requests; the replica whose batch started while others wait in it is killed. (That replica, the
    words that waited in it, word -> answer, word -> what the logs said of it once every answer came.)"""
    ids = {word: f"kill-{word}-{uuid.uuid4().hex[:8]}" for word in WORDS[:6]}
    with ThreadPoolExecutor(6) as pool:
        pending = {w: pool.submit(speak, url, w, tokens=LONG, request_id=ids[w]) for w in ids}
        replica, waiting = wait_until(lambda: running_batch(cluster, ids), "a replica's batch starting")
        ray.kill(ray.get_actor(replica, namespace="serve"), no_restart=True)
        answers = {w: answer.result(timeout=WAIT_S) for w, answer in pending.items()}
    return replica, waiting, answers, replica_log(cluster, ids)


def test_a_killed_replica_fails_only_the_requests_it_was_running_and_says_so(served, ray_cluster):
    """The kill comes once the ingress has heard its batch start (BatchStarted), so it cuts that batch unless the
    batch ended in the moment between: which requests it cut is judged from the answers. A cut request fails with
    a 503 naming the replica; every other request is whole (sent to another replica, or finished before the kill).
    The scenario runs again (Serve replaces the killed replica) until a kill has cut a running request, 3 at most."""
    cut: set[str] = set()
    for _ in range(3):
        replica, waiting, answers, said = kill_a_replica_while_its_batch_runs(served, ray_cluster)
        cut = {w for w, answer in answers.items() if answer.status_code == 503}
        for word in cut:  # it had started on the killed replica, and nowhere else
            error = answers[word].json()["error"]
            assert error["code"] == "replica_died" and error["type"] == "server_error"
            assert error["message"].startswith(f"the replica that was synthesizing this request ({replica}) died")
            assert [where for where, _ in said[word]["started"]] == said[word]["running"] == [replica], said[word]
        whole = {w: answer for w, answer in answers.items() if w not in cut}
        assert {w: a.status_code for w, a in whole.items()} == dict.fromkeys(whole, 200), said
        assert all(samples(answer) == samples_of(LONG) for answer in whole.values())
        # Those that waited in the killed replica and had not started there when it died went to another.
        resent = {w for w in waiting if replica not in [where for where, _ in said[w]["started"]]}
        assert all(said[w]["started"] and len(said[w]["waiting"]) > 1 for w in resent), said
        if cut:
            break
    assert cut, "in 3 tries no kill landed while its replica's batch ran"


def test_a_bad_request_is_refused_by_the_same_route_in_openais_shape(served):
    url = served
    answer = speak(url, "alpha", voice="nobody-saved-this")
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "voice"
    answer = httpx.post(url + "v1/audio/speech", json={"voice": "Aria"}, timeout=WAIT_S)
    assert answer.status_code == 400 and answer.json()["error"]["message"] == "'input' is required"
    assert "Aria" in httpx.get(url + "v1/audio/voices", timeout=WAIT_S).json()["voices"]


def test_the_serving_benchmark_measures_the_deployment(served, tmp_path):
    url = served
    spec = ServeSpec(url=url, users=(2,), requests_per_user=1, max_batches=(0,), tokens=N)
    (finished,) = [e for e in run_serving(spec, tmp_path / "lab.sqlite") if isinstance(e, ServeFinished)]
    (level,) = finished.summaries
    assert finished.status == "finished" and level["ok"] == 2 and level["errors"] == level["lost"] == 0
    assert level["config"] == "stock, fp32, cpu, 1 thread, 2 Ray Serve replicas"


def test_each_replica_asks_ray_for_its_threads_cpus_or_one_gpu():
    """No cluster needed: the placement and the refusals are decided before anything is deployed."""
    plan = plan_from_args(parse_args(["--replicas", "3", "--threads", "4", "--max-batch", "8", "--batching", "request"]))
    assert plan.replica_options() == {"num_replicas": 3, "max_ongoing_requests": 16,
                                      "ray_actor_options": {"num_cpus": 4, "num_gpus": 0}}
    on_gpus = plan_from_args(parse_args(["--device", "cuda", "--replicas", "2"]))  # judged by the replicas' machines
    assert on_gpus.replica_options()["ray_actor_options"] == {"num_cpus": 1, "num_gpus": 1}
    with pytest.raises(SpecError, match="replicas must be 1..1024, got 0"):
        plan_from_args(parse_args(["--replicas", "0"]))
    with pytest.raises(SpecError, match="cannot serve turbo · fp32 · cpu · 1 thread: unknown engine 'turbo'"):
        plan_from_args(parse_args(["--engine", "turbo", "--precision", "fp32"]))


def test_listeners_who_hang_up_stop_their_own_rows_and_later_streams_are_whole(served, ray_cluster):
    """Request-level batches (stock): each hang-up stops that request's rows in its replica, and no stop state is
    left for the requests after it (ChatTTS's own interrupt flag once cut every later stream to one chunk)."""
    for word in WORDS[:3]:
        hang_up_mid_stream(served, ray_cluster, word)
    for word in WORDS[3:5]:
        answer = speak(served, word, stream=True, tokens=LONG)
        assert answer.status_code == 200
        expected = samples_of(LONG)  # ChatTTS's stream drops near-silent samples; on noise a handful
        assert expected - expected // 20 <= samples(answer) <= expected


def test_stop_takes_the_application_down(served, ray_cluster):
    """Last in this file: `--stop` (the fixture's teardown runs it when this test did not)."""
    stopped = rayserve(ray_cluster, "--stop")
    STOPPED.append(True)
    assert stopped.returncode == 0 and "stopped the 'chattts' application" in stopped.stdout, stopped.stderr
    assert httpx.post(served + "v1/audio/speech", json={"input": "x"}, timeout=WAIT_S).status_code == 404


def test_a_lab_deployment_runs_the_apps_continuous_loop_in_its_replica(served, ray_cluster, tmp_path):
    """After --stop: the lab engine's replicas schedule as the app does (--batching continuous, the default): a
    listener who hangs up stops their row, then two streamed requests share the replica's two rows, each with its
    whole clip. Same port: Serve's proxy keeps the
    one it started on."""
    url = served
    deployed = rayserve(ray_cluster, "--replicas", "1", "--model", TINY, "--engine", "lab", "--precision", "fp32",
                        "--threads", "1", "--max-rows", "2", "--no-warm-up", "--port", url.rsplit(":", 1)[1].strip("/"),
                        outputs=tmp_path / "outputs")
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    try:
        hang_up_mid_stream(url, ray_cluster, "india")  # a listener who left frees their row and nobody else's
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda k: speak(url, WORDS[k], stream=True, tokens=LONG), range(2)))
        assert [a.status_code for a in answers] == [200, 200], [a.text[:300] for a in answers]
        for answer in answers:
            assert answer.headers["x-chattts-scheduling"] == "continuous"
            assert answer.headers["x-chattts-config"] == "lab, fp32, cpu, 1 thread, 1 Ray Serve replica"
            assert samples(answer) == samples_of(LONG)  # the rows stream every token they made
    finally:
        rayserve(ray_cluster, "--stop")
