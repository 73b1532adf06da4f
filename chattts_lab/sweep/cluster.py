"""The lab on a Ray cluster: the nodes and their labels, placing and collecting tasks (connecting to it:
chattts_lab.ray_connect, shared with Ray Serve).

A fleet sweep (chattts_lab.sweep.runner, `python -m bench --cluster ray[:ADDRESS] --nodes LABELS`) uses it so:

    SweepSpec(cluster, nodes=labels) --expand()--> [RunConfig(node=label)]
      --TaskPool.submit(one task per cell, placement(cfg): num_cpus = its threads, a GPU for cuda, {label: 1})-->
        on its node: the rule table, then the same CellWorker a local sweep runs --> CellResult with `node`
      --TaskPool.ended()--> the head's Store, each row as its task ends (a node that died: a `lost` row)

Placement is Ray's: a cell asks for as many CPUs as it runs threads, so two cells never share a node's cores;
a label is a custom resource that one machine carries (`ray start --resources '{"gpu-box": 1}'`), and with
one unit of it that machine measures one cell at a time. Tasks run the head's own `chattts_lab` code (shipped
to every node as a Ray py_module) in the Python that started the node's Ray.

Ray is optional (requirements-cluster.txt) and imported only when asked for a cluster. Nothing here knows
about sweeps but the spec's check: `live_nodes`, `placement` and `TaskPool` serve any Ray workload.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

from chattts_lab.ray_connect import connect, ray_module
from chattts_lab.trackers.env import capture_environment
from chattts_lab.sweep.results import RunConfig
from chattts_lab.sweep.spec import SpecError, SweepSpec

# ----------------------------------------------------------------------------------------------
# The cluster's nodes, where a task may go (connecting: chattts_lab.ray_connect)


def live_nodes(ray) -> list[dict]:
    """The cluster's nodes that are alive: {"node_id", "hostname", "resources"} each."""
    return [{"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname"), "resources": n.get("Resources", {})}
            for n in ray.nodes() if n.get("Alive")]


def placement(cfg: RunConfig) -> dict:
    """Ray task options placing one cell: its threads' CPUs, a GPU for a CUDA cell, one unit of its node's label."""
    return {"num_cpus": cfg.threads, "num_gpus": 1 if cfg.device.startswith("cuda") else 0,
            "resources": {cfg.node: 1} if cfg.node else {}}


def unplaceable(cfg: RunConfig, nodes: list[dict]) -> tuple[str, str] | None:
    """(status, reason) when no live node could ever run the cell (Ray would queue it forever), else None."""
    wanted = placement(cfg)
    labelled = [n for n in nodes if not cfg.node or n["resources"].get(cfg.node, 0) >= 1]
    if not labelled:
        return "lost", (f"no live node of the cluster carries the label {cfg.node!r}: start it again "
                        f"(RAY_AUTH_MODE=token ray start --address ... --resources '{{\"{cfg.node}\": 1}}') and resume")
    if not any(n["resources"].get("CPU", 0) >= wanted["num_cpus"] and n["resources"].get("GPU", 0) >= wanted["num_gpus"]
               for n in labelled):
        most = max(n["resources"].get("CPU", 0) for n in labelled)
        gpu = " and a GPU" if wanted["num_gpus"] else ""
        return "skipped", (f"no node{' labelled ' + cfg.node if cfg.node else ''} has {cfg.threads} CPUs{gpu} "
                           f"for Ray (at most {most:g} CPUs)")
    return None


def check_cluster(spec: SweepSpec) -> None:
    """Before a new sweep is created: the cluster answers and carries every label the sweep names."""
    nodes = live_nodes(connect(spec.cluster))
    missing = [label for label in spec.nodes if not any(n["resources"].get(label, 0) >= 1 for n in nodes)]
    if missing:
        raise SpecError(f"no live node of the cluster carries the label(s) {', '.join(missing)}; the nodes carry "
                        f"{', '.join(sorted({label for n in nodes for label in labels(n)})) or 'no labels'}")


def labels(node: dict) -> list[str]:
    return [r for r in node["resources"] if not _is_builtin(r)]


def _is_builtin(resource: str) -> bool:
    """Ray's own resources (CPU, GPU, memory, node:<ip>, ...), as opposed to the labels people give machines."""
    builtin = resource in ("CPU", "GPU", "memory", "object_store_memory")
    return builtin or resource.startswith(("node:", "accelerator_type"))


def describe(ray, nodes: list[dict]) -> str:
    """The cluster in a sentence: its address and each node with its CPUs and labels."""
    described = "; ".join(f"{n['hostname']} {n['node_id'][:8]} ({n['resources'].get('CPU', 0):g} CPUs"
                          + "".join(f", {label}" for label in labels(n)) + ")" for n in nodes)
    return f"the Ray cluster at {ray.get_runtime_context().gcs_address}: {described}"


# ----------------------------------------------------------------------------------------------
# Tasks


@dataclass(frozen=True)
class TaskEnd:
    """How one task ended: `value` it returned, or `failure` (`raised`: the function raised on its node, with
    the traceback in `detail`; `oom`: Ray's memory monitor killed it, the node being short of memory; `lost`:
    its node, or its process there, died) with a one-line `reason`."""

    tag: object
    value: object = None
    failure: str | None = None
    reason: str = ""
    detail: str = ""


class TaskPool:
    """Ray tasks in flight, each with a tag of the caller's, collected as they end (no retries: a task whose
    node dies is reported `lost`, and the caller decides whether to run it again)."""

    def __init__(self, ray):
        self.ray = ray
        self.running: dict = {}

    def submit(self, fn: Callable, payload, tag, **options) -> None:
        ref = self.ray.remote(max_retries=0)(fn).options(**options).remote(payload)
        self.running[ref] = tag

    def ended(self, timeout_s: float) -> list[TaskEnd]:
        """The tasks that ended within `timeout_s` (at least one if any did; possibly none)."""
        if not self.running:
            return []
        ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout_s)
        return [self._end(ref, self.running.pop(ref)) for ref in ready]

    def _end(self, ref, tag) -> TaskEnd:
        exceptions = self.ray.exceptions
        try:
            return TaskEnd(tag, self.ray.get(ref))
        except exceptions.RayTaskError as exc:  # the function itself raised on its node
            return TaskEnd(tag, failure="raised", reason=f"{type(exc.cause).__name__}: {exc.cause}", detail=str(exc))
        except exceptions.RayError as exc:  # the node died, or its raylet, or the task's worker process
            first = (str(exc).strip().splitlines() or [""])[0]
            failure = "oom" if isinstance(exc, exceptions.OutOfMemoryError) else "lost"
            return TaskEnd(tag, failure=failure, reason=f"{type(exc).__name__}: {first}")

    def cancel_all(self) -> list:
        """Kill every task still in flight (their processes with them); returns their tags."""
        tags = list(self.running.values())
        for ref in self.running:
            self.ray.cancel(ref, force=True)
        self.running.clear()
        return tags

    def __len__(self) -> int:
        return len(self.running)


# ----------------------------------------------------------------------------------------------
# On a node


def node_here(label: str | None) -> dict:
    """The node this code runs on (inside a Ray task): its label, hostname, Ray node id and environment."""
    ray = ray_module()
    return {"label": label, "hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id(),
            "environment": capture_environment()}
