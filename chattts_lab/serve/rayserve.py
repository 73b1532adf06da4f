"""The app's `/v1/audio/speech` served by Ray Serve replicas across a cluster's machines.

    python -m chattts_lab.serve.rayserve --cluster ray:HEAD_IP:6379 --replicas 2 --model hf --engine lab --precision int8 --threads 4
    python -m chattts_lab.serve.rayserve --cluster ray:HEAD_IP:6379 --stop

deploys, on a running cluster, one Serve application of two deployments and returns once it answers:

    client --HTTP--> Serve's proxy (the head) --> SpeechIngress: chattts_lab.serve.openai_api's own route (validation, voices,
      OpenAI-shaped errors, audio encoding), whose SpeechBackend is ReplicaSpeech
        --DeploymentHandle, streamed--> Synthesizer replicas (one per --threads CPUs, or per GPU for cuda), each with
          its model loaded once, scheduling as the app does (--batching): continuous, where the engine admits rows
          mid-run (lab), the app's own ContinuousScheduler; else Serve's @serve.batch gathers the requests that
          arrive together and chattts_lab.serve.batch.synthesize_parts runs each group that can share a
          generation (shared_settings)

A replica announces (BatchStarted) when a request's batch starts (continuous: when its first row is admitted). A replica that dies before that has run
nothing of the request: the ingress sends it to another replica. One that dies after it lost the request while
running it: the client gets an OpenAI-shaped 503 (`replica_died`) saying so. Serve starts a replacement replica.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator

from chattts_lab import SynthesisRequest, heap, load_model
from chattts_lab.serve.batch import Part, shared_settings, synthesize_parts
from chattts_lab.options import add_spec_options
from chattts_lab.serve.policy import GROUP, BatchPolicy, ServingPolicy, served_default_on, scheduling_for
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler
from chattts_lab.ray_connect import connect, ray_module
from chattts_lab.devices import DeviceUnavailable, parse_device
from chattts_lab.engines import unsupported_reason
from chattts_lab.checks import SpecError
from chattts_lab.requests import CONTINUOUS, REQUEST_LEVEL
from chattts_lab.synthesis import StreamChunk, SynthesisOutput, warm_up
from chattts_lab.serve import openai_api
from chattts_lab.serve.openai_errors import OpenAIError
from chattts_lab.serve.runtime import RuntimeSettings, describe

try:
    from ray import serve
    from ray.serve.exceptions import RequestCancelledError
except ImportError as exc:  # Ray is optional: requirements-cluster.txt
    raise ImportError("serving on a Ray cluster needs Ray Serve: pip install -r requirements-cluster.txt") from exc

log = logging.getLogger(f"ray.serve.{__name__}")  # Serve writes "ray.serve" records into each replica's log

APP = "chattts"
ATTEMPTS = 3  # a request no replica has started is sent again, to another replica, up to this many times in all
REPLICA_THREADS = 1  # a replica's torch threads unless --threads says, and the CPUs Ray gives it


@dataclass(frozen=True)
class BatchStarted:
    """Sent by a replica when the request's batch starts: from here on the request runs there."""

    replica: str
    requests: int  # in the batch, this one included


# ----------------------------------------------------------------------------------------------
# The replicas


@dataclass(eq=False)
class _Job:
    """One request waiting in a replica for its batch."""

    part: Part
    stream: bool
    rows: int  # what it counts towards --max-batch: its texts, a request larger than a batch counting as one batch
    items: asyncio.Queue = field(default_factory=asyncio.Queue)  # BatchStarted, its StreamChunks, then None
    arrived: float = field(default_factory=time.perf_counter)


def _batch_rows(jobs: list[_Job]) -> int:
    return sum(job.rows for job in jobs)


@serve.deployment
class Synthesizer:
    """The model, loaded once per replica, serving batches of requests."""

    def __init__(self, model: str, settings: RuntimeSettings, policy: BatchPolicy, warm: bool = True,
                 scheduling: str = REQUEST_LEVEL, rows: SchedulerPolicy = SchedulerPolicy()):
        self.model = load_model(settings.load_config(model))
        if warm:  # one-time costs before the replica is ready, not in the first requests' latency
            warm_up(self.model)
            heap.settle()  # full garbage collections stop walking the model (chattts_lab/heap.py)
        self.max_batch = policy.max_batch
        self.generate.set_max_batch_size(policy.max_batch)
        self.generate.set_batch_wait_timeout_s(policy.max_wait_ms / 1000)
        self.name = ray_module().get_runtime_context().get_actor_name()
        self.scheduler = ContinuousScheduler(lambda: self.model, rows) if scheduling == CONTINUOUS else None

    async def speak(self, request: SynthesisRequest, stream: bool) -> AsyncIterator:
        """BatchStarted, then (when `stream`) each StreamChunk, then the SynthesisOutput."""
        loop = asyncio.get_running_loop()
        part = Part(request, threading.Event())
        job = _Job(part, stream, min(part.rows, self.max_batch))
        if stream:
            job.part.on_chunk = lambda chunk: loop.call_soon_threadsafe(job.items.put_nowait, chunk)
        log.info("waiting for a batch on %s", self.name)  # Serve tags each line with the request's id
        done = asyncio.ensure_future(self._continuous(job, loop) if self.scheduler else self.generate(job))
        # The batch's thread schedules its chunks before its result, so this end mark comes after the last chunk.
        done.add_done_callback(lambda _: job.items.put_nowait(None))
        answered = False
        try:
            while (item := await job.items.get()) is not None:
                if isinstance(item, BatchStarted):
                    log.info("started on %s in a batch of %d request(s), after %.3f s waiting", item.replica,
                             item.requests, job.part.queue_wait_s)
                yield item
            result = done.result()
            if isinstance(result, Exception):
                raise result
            answered = True
            yield result
        finally:
            job.part.stop.set()  # a caller that went away (cancelled): its rows stop, the batch carries on
            if not answered and not done.done():
                log.info("the caller left before its answer on %s: its rows stop, the batch carries on", self.name)

    async def _continuous(self, job: _Job, loop) -> SynthesisOutput | Exception:
        """The request's rows join this replica's running generation (Overloaded when its rows and queue are full)."""
        job.part.on_start = lambda: loop.call_soon_threadsafe(job.items.put_nowait, BatchStarted(self.name, 1))
        try:
            return await asyncio.wrap_future(self.scheduler.submit(job.part))
        except Exception as exc:  # out of memory, a full queue: this request hears why
            return exc

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.025, batch_size_fn=_batch_rows)
    async def generate(self, jobs: list[_Job]) -> list[SynthesisOutput | Exception]:
        """Serve's batch, split into the groups that can share one generation (the app's batching rule); a
        group that fails fails alone."""
        started = time.perf_counter()
        for job in jobs:
            job.part.queue_wait_s = started - job.arrived
            job.items.put_nowait(BatchStarted(self.name, len(jobs)))
        groups: dict[tuple, list[_Job]] = {}
        for job in jobs:
            groups.setdefault((job.stream, shared_settings(job.part.request)), []).append(job)
        results: dict[int, SynthesisOutput | Exception] = {}
        for (stream, _), group in groups.items():
            try:
                outs = await asyncio.to_thread(synthesize_parts, self.model, [job.part for job in group], stream)
            except Exception as exc:  # out of memory, a lost model: each of its requests hears why
                outs = [exc] * len(group)
            results.update(zip(map(id, group), outs))
        return [results[id(job)] for job in jobs]


# ----------------------------------------------------------------------------------------------
# The ingress


class ReplicaSpeech:
    """chattts_lab.serve.openai_api's SpeechBackend on the Synthesizer replicas."""

    def __init__(self, synthesizer, api_key: str | None, voices_dir: Path, described: str):
        self.synthesizer, self.api_key, self.voices_dir, self.described = synthesizer, api_key, voices_dir, described
        self._running: dict[str, object] = {}  # session -> its replica call, so stop() can cancel it

    def config(self) -> str:
        return self.described

    def served(self) -> dict:
        return {"model": None, "max_batch": None, "config": self.described}  # the replicas' own, in `config`

    async def whole(self, req: SynthesisRequest) -> SynthesisOutput:
        out = None
        async for item in self._items(req, stream=False):
            out = item
        return out

    async def stream(self, req: SynthesisRequest, session: str, continues: bool = False,
                     ) -> AsyncIterator[StreamChunk | SynthesisOutput]:  # (Ray Serve bounds the replicas' requests)
        async for item in self._items(req, stream=True, session=session):
            yield item

    def stop(self, session: str) -> None:
        if (call := self._running.get(session)) is not None:
            call.cancel()  # the replica's speak() ends, which stops this request's rows

    async def _items(self, req: SynthesisRequest, stream: bool, session: str | None = None) -> AsyncIterator:
        """The replica's items after BatchStarted; a request whose replica died before starting it goes to another."""
        exceptions, failure = ray_module().exceptions, None
        for attempt in range(1, ATTEMPTS + 1):
            call = self.synthesizer.options(stream=True).speak.remote(req, stream)
            if session:
                self._running[session] = call
            replica = None
            try:
                async for item in call:
                    if isinstance(item, BatchStarted):
                        replica = item.replica  # from here on a death of that replica is this request's failure
                        log.info("running on %s", replica)
                    else:
                        yield item
                return
            except RequestCancelledError:
                return  # stop() asked for it
            except exceptions.RayError as exc:
                died = _replica_died(exc, exceptions)
                if died is None:
                    raise getattr(exc, "cause", None) or exc from None  # the library's own error, as raised there
                if replica is not None:
                    raise OpenAIError(
                        503, f"the replica that was synthesizing this request ({replica}) died: {died}; send the "
                             "request again", kind="server_error", code="replica_died") from None
                failure = died
                log.warning("a replica died before it started a request (attempt %d of %d): %s", attempt, ATTEMPTS, died)
            finally:
                if session:
                    self._running.pop(session, None)
        raise OpenAIError(503, f"no replica could take the request ({ATTEMPTS} tried; the last died: "
                               f"{failure})", kind="server_error", code="replica_died")


def _replica_died(exc: Exception, exceptions) -> str | None:
    """The first line of Ray's reason when `exc` says the replica's process died, else None."""
    died = exc if isinstance(exc, exceptions.RayActorError) else getattr(exc, "cause", None)
    if not isinstance(died, exceptions.RayActorError):
        return None
    return (str(died).strip().splitlines() or [type(died).__name__])[0]


# On the head, beside Serve's proxy, where the saved voice cards are; asyncio, so one replica serves many clients.
@serve.deployment(max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}})
@serve.ingress()
class SpeechIngress:
    """The OpenAI-compatible route, in front of the Synthesizer replicas."""

    def __init__(self, synthesizer, api_key: str | None, voices_dir: str, described: str):
        self.backend = ReplicaSpeech(synthesizer, api_key, Path(voices_dir), described)

    def __serve_build_asgi_app__(self):
        from fastapi import FastAPI

        app = FastAPI(title="ChatTTS Lab on Ray Serve")
        app.include_router(openai_api.openai_router(self.backend))
        return app


# ----------------------------------------------------------------------------------------------
# Deploying


@dataclass(frozen=True)
class ServePlan:
    """What to deploy: the serving policy (the app's flags, read as the app reads them: model, auth, batching and its
    bounds), each replica's configuration and resources, the HTTP address."""

    policy: ServingPolicy = field(default_factory=ServingPolicy)
    settings: RuntimeSettings = RuntimeSettings(threads=1)
    replicas: int = 1
    host: str = "127.0.0.1"
    port: int = 8000
    voices_dir: Path = Path("outputs/voices")
    warm_up: bool = True

    def replica_options(self) -> dict:
        """One replica per --threads CPUs, or per GPU; room for the next batch to gather while one runs."""
        gpus = 1 if self.settings.device.startswith("cuda") else 0
        policy = self.policy
        ongoing = policy.max_rows + policy.max_queue if self.continuous() else 2 * policy.max_batch
        return {"num_replicas": self.replicas, "max_ongoing_requests": ongoing,
                "ray_actor_options": {"num_cpus": self.settings.threads, "num_gpus": gpus}}

    def continuous(self) -> bool:
        return scheduling_for(self.policy.batching, self.settings.engine) == CONTINUOUS

    def described(self) -> str:
        return f"{describe(self.settings)} · {self.replicas} Ray Serve replica{'s' if self.replicas > 1 else ''}"


def deploy(cluster: str, plan: ServePlan) -> str:
    """Deploy (or redeploy) the application on the cluster; returns its URL once every replica is ready."""
    connect(cluster)  # the deployments run this code (chattts_lab) on every node
    serve.start(proxy_location="HeadOnly", http_options={"host": plan.host, "port": plan.port})
    policy = plan.policy  # the replicas get their bounds; only the ingress holds the key
    scheduling = scheduling_for(policy.batching, plan.settings.engine)
    synthesizer = Synthesizer.options(**plan.replica_options()).bind(policy.model, plan.settings, policy.request_level(),
                                                                     plan.warm_up, scheduling, policy.rows())
    serve.run(SpeechIngress.bind(synthesizer, policy.auth, str(plan.voices_dir), plan.described()), name=APP, route_prefix="/")
    return f"http://{plan.host}:{plan.port}/"


def undeploy(cluster: str) -> None:
    connect(cluster)
    serve.delete(APP)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chattts_lab.serve.rayserve", description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="ray", help="ray (this machine's cluster, or RAY_ADDRESS) or ray:HEAD_IP:PORT")
    p.add_argument("--replicas", type=int, default=1, help="Synthesizer replicas, each with its own model")
    p.add_argument("--host", default="127.0.0.1", help="address of Serve's HTTP proxy on the head (0.0.0.0 for a LAN)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="replicas are ready sooner, and their first requests pay the one-time costs (JIT) instead")
    p.add_argument("--stop", action="store_true", help="take the application down instead")
    add_spec_options(p.add_argument_group(GROUP), ServingPolicy, GROUP)  # the app's own flags and defaults
    return p.parse_args(argv)


def plan_from_args(args: argparse.Namespace) -> ServePlan:
    if not 1 <= args.replicas <= 1024:
        raise SpecError(f"replicas must be 1..1024, got {args.replicas}")
    policy = ServingPolicy.from_args(args)
    voices = Path(os.environ.get("CHATTTS_LAB_OUTPUTS", "outputs")).resolve() / "voices"
    device = policy.device or "cpu"
    engine, precision = served_default_on(device)  # the app's default before a sweep: no replica has a history
    settings = RuntimeSettings(device, policy.precision or precision, policy.threads or REPLICA_THREADS,
                               policy.engine or engine)
    if reason := refusal_here(settings):
        raise SpecError(f"cannot serve {describe(settings)}: {reason}")
    return ServePlan(policy, settings, args.replicas, args.host, args.port, voices, args.warm_up)


def refusal_here(settings: RuntimeSettings) -> str | None:
    """Why no replica could run these settings, judged before deploying when this machine has their device
    (None: they can run, or only the replicas' machines can tell)."""
    try:
        device = parse_device(settings.device)
    except DeviceUnavailable:
        return None  # a GPU of other machines: each replica judges its own
    return unsupported_reason(settings.engine, device, settings.precision)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.stop:
            undeploy(args.cluster)
            print(f"stopped the {APP!r} application")
            return 0
        plan = plan_from_args(args)
        url = deploy(args.cluster, plan)
    except (SpecError, RuntimeError) as exc:  # a bad argument, no cluster, or a replica that failed to start
        print(f"error: {exc}")
        return 1
    print(f"serving {plan.policy.model} ({plan.described()}) at {url}v1/audio/speech")
    print(f"measure it: python -m bench serve --url {url}; take it down: python -m chattts_lab.serve.rayserve --cluster "
          f"{args.cluster} --stop")
    return 0


if __name__ == "__main__":
    # Run as the module chattts_lab.serve.rayserve, not __main__: Ray pickles the deployments by their module's name.
    from chattts_lab.serve.rayserve import main as module_main

    raise SystemExit(module_main())
