"""A fleet sweep: every cell a Ray task on a cluster node (chattts_lab.sweep.cluster places and collects them), measured
there back to back in its own worker; a lost node's cell is kept as `lost` and measured again on resume.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from chattts_lab.ray_connect import connect
from chattts_lab.sweep import cluster
from chattts_lab.sweep.results import CellResult, RunConfig
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.store import Store
from chattts_lab.sweep.supervisor import measure_back_to_back
from chattts_lab.sweep.events import CellFinished, CellStarted, SweepEvent, SweepPlanned


def run_on_cluster(sweep_id: int, pending: list, total: int, store: Store, spec: SweepSpec,
                    stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[SweepEvent]:
    """Submit every pending cell, commit each row as its task ends. Returns `cancelled` when stopped, `interrupted`
    when a cell was lost with its node (resume measures it again), else `finished`."""
    ray = connect(spec.cluster)
    nodes, pool = cluster.live_nodes(ray), cluster.TaskPool(ray)
    n_done, lost = total - len(pending), 0

    def finished(index: int, result: CellResult) -> CellFinished:
        nonlocal n_done, lost
        store.add_cell(sweep_id, index, result)
        n_done, lost = n_done + (result.status not in ("lost", "cancelled")), lost + (result.status == "lost")
        return CellFinished(sweep_id, index, total, result, n_done, None)

    try:
        for index, cfg in pending:
            yield CellStarted(sweep_id, index, total, cfg, None)
            ruled = cluster.unplaceable(cfg, nodes)  # Ray would queue it forever: a row with the reason instead
            if ruled:
                yield finished(index, CellResult(cfg, *ruled, node=_label_only(cfg)))
            else:
                pool.submit(measure_on_node, cfg.to_dict(), (index, cfg), **cluster.placement(cfg))
        plan = (f"{len(pool)} cell(s) as Ray tasks on {cluster.describe(ray, nodes)}; each in a fresh worker process "
                "on its node, with the CPUs of its threads to itself, its timed calls back to back.")
        store.set_note(sweep_id, "plan", plan)
        yield SweepPlanned(sweep_id, plan)
        while len(pool):
            if stop():
                for index, cfg in pool.cancel_all():
                    yield finished(index, CellResult(cfg, "cancelled", "stopped by the user while this cell ran or "
                                                     "waited for its node", node=_label_only(cfg)))
                return "cancelled"
            for end in pool.ended(poll_s):
                yield finished(end.tag[0], fleet_result(end))
    finally:  # an exception or the generator closed: no task keeps measuring for a sweep that is gone
        pool.cancel_all()
    return "interrupted" if lost else "finished"


def fleet_result(end) -> CellResult:
    """A cell's row from how its task ended: its own row, or why there is none."""
    cfg = end.tag[1]
    if end.failure is None:
        return CellResult.from_dict(end.value)
    if end.failure == "raised":  # the lab's code failed on the node, outside the worker: a bug, with its traceback
        return CellResult(cfg, "error", f"the cell's Ray task raised {end.reason}"[:800], traceback=end.detail[-4000:],
                          node=_label_only(cfg))
    if end.failure == "oom":
        return CellResult(cfg, "oom", f"Ray killed the cell's task, its node short of memory ({end.reason})"[:800],
                          node=_label_only(cfg))
    where = f"node {cfg.node!r}" if cfg.node else "its node"
    return CellResult(cfg, "lost", f"{where} was lost while the cell ran ({end.reason})"[:800], node=_label_only(cfg))


def _label_only(cfg: RunConfig) -> dict:
    return {"label": cfg.node} if cfg.node else {}


def measure_on_node(config: dict) -> dict:
    """A Ray task on a cluster node: the cell measured there, and where it ran (a CellResult as a dict)."""
    cfg = RunConfig.from_dict(config)
    node: dict = {}

    def note_node() -> None:  # imports torch for the environment: done while the worker loads, never while timed
        node.update(cluster.node_here(cfg.node))

    result = measure_back_to_back(cfg, while_loading=note_node)
    if not node:  # a cell the rule table stopped started no worker
        note_node()
    return replace(result, node=node).to_dict()
