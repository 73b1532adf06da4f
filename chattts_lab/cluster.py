"""Fleet sweeps on Ray: each cell of a sweep is a Ray task on a cluster node, measured there in a fresh worker.

    SweepSpec(cluster="ray[:ADDRESS]", nodes=labels) --expand()--> [RunConfig(node=label)]
      --a Ray task per cell: num_cpus = its threads (a GPU for cuda), {label: 1}--> on its node: the rule table,
        then the same CellWorker a local sweep runs --> CellResult with `node` --> the head's Store as each ends

Placement is Ray's: a cell asks for as many CPUs as it runs threads, so two cells never share a node's cores;
a label is a custom resource that one machine carries (`ray start --resources '{"gpu-box": 1}'`), and with
one unit of it that machine measures one cell at a time. A node that leaves the cluster while its cell runs
gives that cell a `lost` row with the reason; `--resume` measures it again. The cells run the head's own
`chattts_lab` code (shipped to every node as a Ray py_module), in the Python that started the node's Ray.

Ray is optional (requirements-cluster.txt) and imported only when a sweep asks for a cluster. `connect`,
`live_nodes` and `placement` are not sweep-specific: any Ray workload of the lab can reuse them.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

from chattts_lab.env import capture_environment
from chattts_lab.results import CellResult, RunConfig
from chattts_lab.spec import SpecError, SweepSpec, cell_rule
from chattts_lab.store import Store
from chattts_lab.sweep import CellFinished, CellStarted, CellWorker, SweepEvent, SweepPlanned, WorkerEnded, result_of
from chattts_lab.worker import repeat_until

log = logging.getLogger(__name__)
PACKAGE_DIR = Path(__file__).resolve().parent
# Set on a node (the environment `ray start` runs in), each of its cells waits once its worker is loaded until
# `<dir>/<cell>.release` exists, having written `<dir>/<cell>.running` (the worker's pid). It lets a test or a
# demonstration take a node away while a cell is surely running on it.
HOLD_DIR_VAR = "CHATTTS_LAB_FLEET_HOLD_DIR"


# ----------------------------------------------------------------------------------------------
# The cluster: connecting, its nodes, where a task may go


def ray_module():
    try:
        import ray
    except ImportError as exc:
        raise SpecError("a cluster sweep needs Ray: pip install -r requirements-cluster.txt") from exc
    return ray


def address_of(cluster: str) -> str | None:
    """`ray` -> None (Ray's own choice: RAY_ADDRESS, a cluster started on this machine, else a new local one);
    `ray:ADDRESS` -> ADDRESS (host:port of a head, or ray://host:port)."""
    return cluster.partition(":")[2] or None


def connect(cluster: str):
    """The `ray` module, connected to `cluster` (reconnected if this process is connected elsewhere)."""
    ray = ray_module()
    address = address_of(cluster)
    if ray.is_initialized():
        if address in (None, "auto") or ray.get_runtime_context().gcs_address == address:
            return ray
        ray.shutdown()
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 runtime_env={"py_modules": [str(PACKAGE_DIR)]})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SpecError(f"cannot connect to the Ray cluster at {address or 'this machine'}: {exc}") from exc
    return ray


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
                        f"(ray start --address ... --resources '{{\"{cfg.node}\": 1}}') and resume")
    if not any(n["resources"].get("CPU", 0) >= wanted["num_cpus"] and n["resources"].get("GPU", 0) >= wanted["num_gpus"]
               for n in labelled):
        most = max(n["resources"].get("CPU", 0) for n in labelled)
        gpu = " and a GPU" if wanted["num_gpus"] else ""
        return "skipped", (f"no node{' labelled ' + cfg.node if cfg.node else ''} has {cfg.threads} CPUs{gpu} "
                           f"for Ray (at most {most:g} CPUs)")
    return None


# ----------------------------------------------------------------------------------------------
# On the node


def measure_on_node(config: dict) -> dict:
    """One cell on the node this Ray task runs on: as a local sweep measures it, plus where it ran (to_dict)."""
    cfg = RunConfig.from_dict(config)
    ray = ray_module()
    node = {"label": cfg.node, "hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id(),
            "environment": capture_environment()}
    return replace(measure_here(cfg), node=node).to_dict()


def measure_here(cfg: RunConfig, never: Callable[[], bool] = lambda: False) -> CellResult:
    """The rule table judged on this node (its devices and cores), else a fresh CellWorker: loaded, then timed
    `repeats` calls for at least `min_time_s`, one after another (a cluster sweep has no interleaved passes)."""
    ruled = cell_rule(cfg)
    if ruled:
        return CellResult(cfg, *ruled)
    worker = CellWorker(cfg)
    try:
        ready = worker.ready(never)
        hold_if_asked(cfg, ready["pid"])
        repeat_until(lambda: worker.repeat({}, never), cfg.repeats, cfg.min_time_s, cfg.max_repeats)
        outcome = worker.finish(never)
    except WorkerEnded as ended:
        outcome = ended.outcome
    finally:
        worker.kill()
    return result_of(cfg, outcome)


def hold_if_asked(cfg: RunConfig, worker_pid: int, poll_s: float = 0.1) -> None:
    """Wait (at most the cell's timeout) for the release file when this node sets HOLD_DIR_VAR; see its comment."""
    folder = os.environ.get(HOLD_DIR_VAR)
    if not folder:
        return
    name = hold_name(cfg)
    (Path(folder) / f"{name}.running").write_text(str(worker_pid))
    release, t0 = Path(folder) / f"{name}.release", time.monotonic()
    while not release.exists() and time.monotonic() - t0 < cfg.timeout_s:
        time.sleep(poll_s)


def hold_name(cfg: RunConfig) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", cfg.key)


# ----------------------------------------------------------------------------------------------
# On the head


def check_cluster(spec: SweepSpec) -> None:
    """Before a new sweep is created: the cluster answers and carries every label the sweep names."""
    nodes = live_nodes(connect(spec.cluster))
    missing = [label for label in spec.nodes if not any(n["resources"].get(label, 0) >= 1 for n in nodes)]
    if missing:
        raise SpecError(f"no live node of the cluster carries the label(s) {', '.join(missing)}; the nodes carry "
                        f"{', '.join(sorted({label for n in nodes for label in labels(n)})) or 'no labels'}")


def run_on_cluster(sweep_id: int, pending: list, total: int, store: Store, spec: SweepSpec,
                   stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[SweepEvent]:
    """Submit every pending cell as a Ray task, commit each row as its task ends; returns (as the generator's value)
    `cancelled` when stopped, `interrupted` when a cell was lost with its node (resume measures it), else `finished`.
    On resume a label no live node carries gives `lost` rows again, with how to bring the node back."""
    ray = connect(spec.cluster)
    nodes = live_nodes(ray)
    task = ray.remote(max_retries=0)(measure_on_node)
    running, n_done, lost = {}, total - len(pending), 0
    try:
        for index, cfg in pending:
            yield CellStarted(sweep_id, index, total, cfg, None)
            ruled = unplaceable(cfg, nodes)
            if ruled:
                result = CellResult(cfg, *ruled, node={"label": cfg.node} if cfg.node else {})
                store.add_cell(sweep_id, index, result)
                n_done, lost = n_done + (result.status != "lost"), lost + (result.status == "lost")
                yield CellFinished(sweep_id, index, total, result, n_done, None)
            else:
                running[task.options(**placement(cfg)).remote(cfg.to_dict())] = (index, cfg)
        plan = plan_sentence(ray, len(running), nodes)
        store.set_note(sweep_id, "plan", plan)
        yield SweepPlanned(sweep_id, plan)
        while running:
            if stop():
                yield from _cancel(ray, running, sweep_id, total, n_done, store)
                return "cancelled"
            ready, _ = ray.wait(list(running), num_returns=1, timeout=poll_s)
            for ref in ready:
                index, cfg = running.pop(ref)
                result = collect(ray, ref, cfg)
                store.add_cell(sweep_id, index, result)
                n_done, lost = n_done + (result.status != "lost"), lost + (result.status == "lost")
                yield CellFinished(sweep_id, index, total, result, n_done, None)
    finally:  # an exception or the generator closed: no task keeps measuring for a sweep that is gone
        for ref in running:
            ray.cancel(ref, force=True)
    return "interrupted" if lost else "finished"


def collect(ray, ref, cfg: RunConfig) -> CellResult:
    """The row a finished task gave back, or why it gave none: its node (or its process there) died -> `lost`."""
    try:
        return CellResult.from_dict(ray.get(ref))
    except ray.exceptions.RayTaskError as exc:  # the lab's own code raised on the node: a bug, with its traceback
        return CellResult(cfg, "error", f"the cell's Ray task raised {type(exc.cause).__name__}: {exc.cause}"[:800],
                          traceback=str(exc)[-4000:], node={"label": cfg.node} if cfg.node else {})
    except ray.exceptions.RayError as exc:  # node died, its raylet or the task's worker process was killed
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        where = f"node {cfg.node!r}" if cfg.node else "its node"
        return CellResult(cfg, "lost", f"{where} was lost while the cell ran ({type(exc).__name__}: {first})"[:800],
                          node={"label": cfg.node} if cfg.node else {})


def _cancel(ray, running: dict, sweep_id: int, total: int, n_done: int, store: Store) -> Iterator[CellFinished]:
    for ref, (index, cfg) in list(running.items()):
        ray.cancel(ref, force=True)  # kills the task's process; its worker dies with it (PR_SET_PDEATHSIG)
        del running[ref]
        result = CellResult(cfg, "cancelled", "stopped by the user while this cell ran or waited for a node",
                            node={"label": cfg.node} if cfg.node else {})
        store.add_cell(sweep_id, index, result)
        yield CellFinished(sweep_id, index, total, result, n_done, None)


def _is_builtin(resource: str) -> bool:
    """Ray's own resources (CPU, GPU, memory, node:<ip>, ...), as opposed to the labels people give machines."""
    return resource in ("CPU", "GPU", "memory", "object_store_memory") or resource.startswith(("node:", "accelerator_type"))


def labels(node: dict) -> list[str]:
    return [r for r in node["resources"] if not _is_builtin(r)]


def plan_sentence(ray, tasks: int, nodes: list[dict]) -> str:
    described = "; ".join(f"{n['hostname']} {n['node_id'][:8]} ({n['resources'].get('CPU', 0):g} CPUs"
                          + "".join(f", {label}" for label in labels(n)) + ")" for n in nodes)
    return (f"{tasks} cell(s) as Ray tasks on the cluster at {ray.get_runtime_context().gcs_address}, each in a fresh "
            f"worker process on its node with the CPUs of its threads to itself; nodes: {described}.")
