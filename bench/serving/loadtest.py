"""The serving benchmark: many users against the real app over HTTP, measured per request and per load level.

For each scheduling (`batching`: continuous, where each request joins the running generation at the next GPT
step, with `max_rows` rows; request-level, for every `max_batches`: 8 batches requests together, 1 serves them
one at a time) the benchmark starts the app (`app.py`, or targets a running one with `url`), warms it up, then runs each load
level: N users at once (closed loop: each user sends its next request when the last one is answered), or an
open-loop arrival rate. Every request goes to the OpenAI-compatible `/v1/audio/speech` route and records,
as the client saw it: time to first byte and first audio, latency, audio seconds, for a streamed one the
stalls a real-time player starting at its first audio would have heard (`listening.py`: total, worst, and
whether it was continuous, no stall over 100 ms), and from the server's headers its queue wait, how many
requests shared its batch and which scheduling ran.

A run is kept in the same SQLite history as sweeps: a sweep row whose spec has `kind: serve`, with the levels
and every request in its `serving` note, so bundles export and import it like any other sweep.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import httpx

from bench.serving.listening import player_stalls
from chattts_lab import heap
from chattts_lab.metrics import SAMPLE_RATE
from chattts_lab.requests import CONTINUOUS
from chattts_lab.serve.listen import PORT_TAKEN
from bench.serving.spec import ServeSpec
from bench.serving.summaries import NOTE, summarize_level

ROOT = Path(__file__).resolve().parents[2]
REQUEST_DEADLINE_S = 900.0  # a request with no answer by then is lost


def run_to_end(coro):
    """`asyncio.run(coro)`, also from a thread that already runs an event loop (a notebook; a test process that drove
    a browser), where asyncio.run refuses: there on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ------------------------------------------------------------------------------------------------
# Events, as the sweep runner has them: the CLI prints them, the Benchmark tab shows them


@dataclass
class ServeStarted:
    sweep_id: int
    levels: int


@dataclass
class LevelStarted:
    index: int
    level: dict


@dataclass
class LevelFinished:
    index: int
    summary: dict


@dataclass
class ServeFinished:
    sweep_id: int
    status: str
    summaries: list[dict] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------
# Running


def run_serving(spec: ServeSpec, db_path, should_stop: Callable[[], bool] = lambda: False) -> Iterator:
    """Run the benchmark, storing it as it goes; yields the events above."""
    from chattts_lab.trackers.env import capture_environment
    from chattts_lab.history.store import Store

    spec = spec.validate()
    if spec.capacity:
        raise ValueError("a capacity search runs through bench.serving.capacity.run_capacity")
    served = served_by(spec.url) if spec.url else {}
    with Store(db_path) as store:
        sweep_id = store.create_sweep(_recorded(spec, served), capture_environment())
    levels = spec.levels()
    yield ServeStarted(sweep_id, len(levels))
    summaries, requests, status = [], [], "interrupted"  # until every level has run (or a stop was asked)
    try:
        for batching, max_batch in spec.apps():
            if should_stop():
                break
            with _app(spec, batching, max_batch, db_path) as app:
                for index, level in enumerate(levels):
                    if (level["batching"], level["max_batch"]) != (batching, max_batch) or should_stop():
                        continue
                    yield LevelStarted(index, _as_served(level, served))
                    records, rss = run_to_end(_measured_level(app, spec, level))
                    summary = summarize_level(_as_served(level, served), records) | rss
                    summaries.append(summary)
                    requests += [{"level": index, **r} for r in records]
                    _save(db_path, sweep_id, summaries, requests)
                    yield LevelFinished(index, summary)
        status = "cancelled" if should_stop() else "finished"
    finally:  # what was measured is kept, whatever ended the run
        _save(db_path, sweep_id, summaries, requests, status)
    yield ServeFinished(sweep_id, status, summaries)


def served_by(url: str) -> dict:
    """What a running app says it serves (GET /v1/audio/voices, "server"): model, scheduling, max_batch, config; {}
    when it does not say (an older app), so that nothing false is recorded in its place."""
    try:
        response = httpx.get(url.rstrip("/") + "/v1/audio/voices", timeout=30).raise_for_status()
        return response.json().get("server") or {}
    except (httpx.HTTPError, ValueError):  # not up yet, or not this app: the levels' requests will say why
        return {}


def _recorded(spec: ServeSpec, served: dict) -> dict:
    """The spec as stored: with --url, the model the running app says it loaded (not --model's default)."""
    if not spec.url:
        return spec.as_dict()
    return {**spec.as_dict(), "model": served.get("model"), "served": served}


def _as_served(level: dict, served: dict) -> dict:
    """A level of a run against --url, with the running app's own batch limit (None when it does not say)."""
    return {**level, "max_batch": served.get("max_batch")} if level.get("max_batch") == 0 else level


def _save(db_path, sweep_id: int, summaries: list[dict], requests: list[dict], status: str | None = None,
          **more) -> None:
    from chattts_lab.history.store import Store

    with Store(db_path) as store:
        store.set_note(sweep_id, NOTE, {"levels": summaries, "requests": requests, **more})
        if status:
            store.set_status(sweep_id, status)


class _app:
    """The app to measure: the given URL as it is, or a fresh `app.py` with this batching, warmed up first."""

    def __init__(self, spec: ServeSpec, batching: str | None, max_batch: int, db_path):
        self.spec, self.batching, self.max_batch, self.db_path = spec, batching, max_batch, db_path
        self.proc, self.log = None, None

    url: str = ""

    def __enter__(self) -> "_app":
        if self.spec.url:
            self.url = self.spec.url.rstrip("/") + "/"
            self._warm_up()
            return self
        for attempt in range(3):  # free_port's pick is a guess: a port taken before the app binds it is tried again
            try:
                self._start(free_port())
                break
            except PortTaken:
                if attempt == 2:
                    raise
        self._warm_up()
        return self

    def _start(self, port: int) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="serve-app-", suffix=".log", delete=False)
        cmd = [sys.executable, str(ROOT / "app.py"), "--model", self.spec.model, "--port", str(port),
               "--batching", self.batching, "--max-wait-ms", str(self.spec.max_wait_ms)]
        # continuous: its rows, and a queue as long as any level's users (refusals are for real overload)
        cmd += ["--max-rows" if self.batching == CONTINUOUS else "--max-batch", str(self.max_batch),
                "--max-queue", "256"]
        for flag in ("engine", "precision", "device", "threads"):
            if getattr(self.spec, flag) is not None:
                cmd += [f"--{flag}", str(getattr(self.spec, flag))]
        # The app's default configuration is the recommendation of the history it reads: this run's.
        env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1",
                   CHATTTS_LAB_HISTORY=str(Path(self.db_path).resolve()),
                   CHATTTS_LAB_OUTPUTS=tempfile.mkdtemp(prefix="serve-app-outputs-"))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}/"
        try:
            self._wait_until_up(self.url)
        except RuntimeError as exc:  # its message holds the log's tail: the process and its log go
            taken = PORT_TAKEN in self._log_tail()
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self._close_log()
            if taken:
                raise PortTaken(f"port {port} was taken before the app bound it") from exc
            raise

    def _warm_up(self) -> None:
        """One full batch, outside every level: it waits for the app's preload and pays the first call's costs
        (a full batch also runs at once, however long the app waits for company)."""
        async def batch() -> list[dict]:
            t0 = time.perf_counter()
            texts = self.spec.texts
            # request-level: one full batch; continuous: two rows (a full batch has no meaning there)
            count = 2 if self.batching == CONTINUOUS else max(1, self.max_batch)
            return await asyncio.gather(*(_request(self.url, self.spec, texts[i % len(texts)], -1, t0)
                                          for i in range(count)))

        failed = [r["error"] for r in run_to_end(batch()) if r["status"] != "ok"]
        if failed:
            raise RuntimeError(f"the app could not serve its first requests: {failed[0]}; {self._log_tail()}")
        heap.settle()  # this client imports torch as well: its full collections would delay the arrivals it times

    def _wait_until_up(self, url: str, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                httpx.get(url + "v1/audio/voices", timeout=5).raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(f"the app did not answer within {timeout_s:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        if self.log is None:
            return "(a running app: see its own log)"
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-2000:]

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self._close_log()

    def _close_log(self) -> None:
        self.log.close()
        os.unlink(self.log.name)


class PortTaken(RuntimeError):
    """The app's port was taken between free_port's pick and the app's bind: try another."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for an app started next (its bind comes seconds later,
    once it has imported torch). Picked at random below the kernel's ephemeral range: outgoing connections (a
    browser's, Ray's, any HTTP client's) take their ports from that range, and one once took an app's port in
    those seconds. Above Ray's worker ports (10002-19999 by default)."""
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(20_000, low) if low > 20_100 else 0  # 0: let the OS pick, as a last resort
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port below the ephemeral range")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; macOS and Windows start theirs at 49152


RSS_EVERY_S = 2.0


async def _measured_level(app: _app, spec: ServeSpec, level: dict) -> tuple[list[dict], dict]:
    """The level's request records, and the app's memory over the level when this benchmark started the app:
    RSS at its start and end, and the peak (a long level at a steady rate is a soak test)."""
    if app.proc is None:
        return await _run_level(app.url, spec, level), {}
    import psutil

    process, samples = psutil.Process(app.proc.pid), []

    async def sample() -> None:
        while True:
            samples.append(process.memory_info().rss / 2**20)
            await asyncio.sleep(RSS_EVERY_S)

    sampler = asyncio.ensure_future(sample())
    try:
        records = await _run_level(app.url, spec, level)
    finally:
        sampler.cancel()
    samples.append(process.memory_info().rss / 2**20)
    return records, rss_figures(samples)


def rss_figures(samples: list[float]) -> dict:
    """The app's memory over a level from its RSS every RSS_EVERY_S: start, end, peak and growth, and the growth
    over the level's second half, which tells a leak from buffers reaching their size (the continuous loop's KV
    cache grows to its rows the first time they are all busy: about 400 MB at 8 rows of full-size weights)."""
    start, middle, end = samples[0], samples[len(samples) // 2], samples[-1]
    return {"rss_start_mb": start, "rss_end_mb": end, "rss_peak_mb": max(samples),
            "rss_growth_pct": 100 * (end - start) / start, "rss_mid_mb": middle,
            "rss_late_growth_pct": 100 * (end - middle) / middle}


async def _run_level(url: str, spec: ServeSpec, level: dict) -> list[dict]:
    t0 = time.perf_counter()
    if "users" in level:
        async def user(u: int) -> list[dict]:
            await asyncio.sleep(u * spec.ramp_s / level["users"])  # users start spread over the ramp (0: at once)
            return [await _request(url, spec, spec.texts[(u + k * level["users"]) % len(spec.texts)], u, t0,
                                   variant=u + k if spec.mixed else 0)
                    for k in range(spec.requests_per_user)]

        per_user = await asyncio.gather(*(user(u) for u in range(level["users"])))
        return [r for records in per_user for r in records]
    arrivals, t, rng = [], 0.0, random.Random(0)  # the same arrival times for every run of this spec
    while (t := t + rng.expovariate(level["rate"])) < spec.duration_s:
        arrivals.append(t)

    async def arrive(i: int, at: float) -> dict:
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
        return await _request(url, spec, spec.texts[i % len(spec.texts)], i, t0, variant=i if spec.mixed else 0)

    return list(await asyncio.gather(*(arrive(i, at) for i, at in enumerate(arrivals))))


MIXED_VOICES = ("Aria", "Bo", "Cleo", "seed:7")


async def _request(url: str, spec: ServeSpec, text: str, user: int, t0: float, variant: int = 0) -> dict:
    """One request as the client sees it; failures are records too (status error or lost). A nonzero `variant`
    (mixed runs) picks another voice, every other request streamed the other way, every third one half as long;
    variant 0 (every request of a run that is not mixed) is the spec's request exactly."""
    stream = spec.stream if variant % 2 == 0 else not spec.stream
    tokens = max(1, spec.tokens // 2) if variant and variant % 3 == 0 else spec.tokens  # variant 0: as asked
    body = {"model": "tts-1", "input": text, "voice": MIXED_VOICES[variant % len(MIXED_VOICES)],
            "response_format": "pcm", "stream": stream, "min_new_token": tokens, "max_new_token": tokens}
    start = time.perf_counter()
    record = {"user": user, "submitted_s": start - t0, "stream": stream, "tokens": tokens, "voice": body["voice"],
              "status": "ok", "error": None, "ttfb_s": None,
              "ttfa_s": None, "latency_s": None, "queue_s": None, "server_first_audio_s": None, "audio_s": 0.0,
              "batch_requests": None, "config": None, "scheduling": None,
              "stall_total_s": None, "stall_worst_s": None, "stalls": None, "continuous": None}
    try:
        async with httpx.AsyncClient(timeout=REQUEST_DEADLINE_S) as client:
            async with client.stream("POST", url + "v1/audio/speech", json=body) as response:
                record["ttfb_s"] = time.perf_counter() - start
                if response.status_code != 200:
                    error = (await response.aread()).decode(errors="replace")[:300]
                    return record | {"status": "error", "error": f"HTTP {response.status_code}: {error}"}
                size, arrivals = 0, []  # (seconds since the request, samples received by then)
                async for chunk in response.aiter_bytes():
                    if chunk and record["ttfa_s"] is None:
                        record["ttfa_s"] = time.perf_counter() - start
                    size += len(chunk)
                    arrivals.append((time.perf_counter() - start, size // 2))
                headers = response.headers
        record["latency_s"] = time.perf_counter() - start
        record["audio_s"] = size / 2 / SAMPLE_RATE  # 16-bit mono pcm
        record["queue_s"] = _float(headers.get("x-chattts-queue-s"))
        record["server_first_audio_s"] = _float(headers.get("x-chattts-first-audio-s"))
        record["batch_requests"] = int(headers.get("x-chattts-batch-requests") or 0) or None
        record["config"] = headers.get("x-chattts-config")  # what the app ran: engine, precision, device, threads
        record["scheduling"] = headers.get("x-chattts-scheduling")  # continuous or request-level batching
        if stream:  # as a real-time player starting at the first audio would have heard it
            stalls = player_stalls(arrivals)
            record |= {"stall_total_s": stalls.total_s, "stall_worst_s": stalls.worst_s, "stalls": stalls.count,
                       "continuous": stalls.continuous()}
        return record
    except httpx.TimeoutException:
        return record | {"status": "lost", "error": f"no answer within {REQUEST_DEADLINE_S:.0f} s"}
    except httpx.HTTPError as exc:
        return record | {"status": "lost", "error": f"{type(exc).__name__}: {exc}"[:300]}


def _float(text: str | None) -> float | None:
    return float(text) if text else None
