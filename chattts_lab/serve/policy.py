"""The serving policy: what a server runs and how it schedules requests, declared once for both servers.

`python app.py` and `python -m chattts_lab.serve.rayserve` build their shared flags from `ServingPolicy`'s fields
(`chattts_lab.options.add_spec_options`: each field's default, limit, flag and help), and read them back with
`ServingPolicy.from_args`. Both serve the same default configuration: the app this machine's benchmark
recommendation, else the served default for its CPU (`engines.served_default`), and Ray Serve, whose replicas run on
other machines, the served default. The bounds of the two schedulings (`BatchPolicy`, `SchedulerPolicy`) take their
defaults and limits from the same fields.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Literal

from pydantic import Field as Limit

from chattts_lab import engines
from chattts_lab.checks import SpecError
from chattts_lab.devices import DeviceUnavailable, parse_device
from chattts_lab.options import build_spec, field_problems, option
from chattts_lab.requests import CONTINUOUS, MAX_BATCH, REQUEST_LEVEL, SCHEDULINGS

GROUP = "serving policy"  # the argparse group both command lines show these flags in


def _env(name: str, default: str | None = None):
    return lambda: os.environ.get(name, default)  # read when a policy is made, so a test's environment counts


@dataclass(frozen=True)
class ServingPolicy:
    """What a server runs (model, engine, precision, device, threads), who may call it (auth) and how requests share
    the model (batching and its bounds). None: the server's own default (see each help)."""

    model: str = option(
        help="auto (default), hf, synthetic, synthetic-tiny or a model folder (for Ray Serve: present on every "
             "machine); or set $CHATTTS_LAB_MODEL", flag="--model", factory=_env("CHATTTS_LAB_MODEL", "auto"),
        group=GROUP)
    auth: Annotated[str, Limit(pattern=r"^[^:]+:")] | None = option(  # the env keeps it out of `ps`
        help="require a login in the app, and this Bearer key on /v1 (default: none, or $CHATTTS_LAB_AUTH)",
        flag="--auth", factory=_env("CHATTTS_LAB_AUTH"), group=GROUP, rule="--auth takes user:pass",
        metavar="USER:PASS")
    engine: str | None = option(
        None, "serve on this engine (default: the app's benchmark recommendation on this machine, else the served "
              "default for the device: engines.SERVED_DEFAULTS, the first that runs there)", "--engine", group=GROUP)
    precision: str | None = option(None, "serve in this precision (default: as --engine's)", "--precision",
                                   group=GROUP)
    device: str | None = option(
        None, "serve on this device (default: the app's recommendation's, else cpu; cuda on Ray Serve: one GPU per "
              "replica)", "--device", group=GROUP)
    threads: Annotated[int, Limit(ge=1)] | None = option(
        None, "torch threads per request (default: the usable cores; on Ray Serve 1 per replica, the CPUs Ray gives "
              "it)", "--threads", int, group=GROUP)
    batching: Literal[SCHEDULINGS] = option(
        CONTINUOUS, "continuous: on an engine whose loop admits rows mid-run (lab, onnx) each request joins the "
                    "running generation at the next step and leaves when done; request: requests that arrive together "
                    "run as one batch from start to end (always so on the other engines)", "--batching", group=GROUP,
        rule=f"batching must be {' or '.join(SCHEDULINGS)}, got {{input}}", choices=SCHEDULINGS)
    max_batch: Annotated[int, Limit(ge=1, le=MAX_BATCH)] = option(
        8, "request-level batching: requests that arrive together run in batches of up to N texts (1 serves one at "
           "a time)", "--max-batch", int, group=GROUP, what="max batch", metavar="N")
    max_wait_ms: Annotated[float, Limit(ge=0, le=600_000)] = option(
        25.0, "how long a lone request waits for others to share its batch", "--max-wait-ms", float, group=GROUP,
        what="max wait", unit="ms", metavar="MS")
    max_rows: Annotated[int, Limit(ge=1, le=MAX_BATCH)] = option(
        8, "continuous batching: texts generated at once", "--max-rows", int, group=GROUP, what="max rows",
        metavar="N")
    max_queue: Annotated[int, Limit(ge=0, le=10_000)] = option(
        16, "requests waiting beyond those; more get HTTP 503 with Retry-After", "--max-queue", int, group=GROUP,
        what="max queue", metavar="N")

    @staticmethod
    def from_args(args: argparse.Namespace) -> "ServingPolicy":
        """The policy a command line gives (SpecError names every problem); what it leaves out is the default."""
        return build_spec(ServingPolicy, vars(args))

    def request_level(self) -> "BatchPolicy":
        return BatchPolicy(self.max_batch, self.max_wait_ms)

    def rows(self) -> "SchedulerPolicy":
        return SchedulerPolicy(self.max_rows, self.max_queue)

    def chooses_configuration(self) -> bool:
        """Whether the command line named any of engine, precision, device or threads."""
        return any(v is not None for v in (self.engine, self.precision, self.device, self.threads))


def scheduling_for(requested: str, engine: str) -> str:
    """The scheduling a server asked for `requested` (one of requests.SCHEDULINGS) runs on `engine`: continuous only
    where the engine's decode loop admits rows mid-run (Engine.continuous_batching_reason)."""
    admits_rows = engines.get(engine).continuous_batching_reason is None
    return CONTINUOUS if requested == CONTINUOUS and admits_rows else REQUEST_LEVEL


def served_default_on(device: str) -> tuple[str, str]:
    """The (engine, precision) a server with no recommendation serves on `device`: engines.served_default, judged on
    this machine; a device only other machines have (a cluster's GPUs) gets the reference, which runs everywhere."""
    try:
        return engines.served_default(parse_device(device))
    except DeviceUnavailable:
        return engines.REFERENCE


def _check(bounds) -> None:
    """`bounds` within the serving policy's limits, else SpecError (a ValueError) worded from those limits."""
    problems = field_problems(replace(ServingPolicy(model="auto", auth=None), **asdict(bounds)))
    if problems:
        raise SpecError("; ".join(problems))


@dataclass(frozen=True)
class BatchPolicy:
    """Request-level batching's bounds (chattts_lab.serve.batcher): --max-batch and --max-wait-ms."""

    max_batch: int = ServingPolicy.max_batch  # texts (GPT batch rows) in one generation; 1: one request at a time
    max_wait_ms: float = ServingPolicy.max_wait_ms  # how long a lone request waits for others before it runs

    def __post_init__(self):
        _check(self)


@dataclass(frozen=True)
class SchedulerPolicy:
    """Continuous batching's bounds (chattts_lab.serve.scheduler): --max-rows and --max-queue."""

    max_rows: int = ServingPolicy.max_rows  # texts generated at once (KV-cache rows)
    max_queue: int = ServingPolicy.max_queue  # requests waiting for a row; beyond, refused at once

    def __post_init__(self):
        _check(self)
