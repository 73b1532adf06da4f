"""The test run's own schedule (tests/conftest.py): under pytest-xdist each file is one unit of work, the Ray files
one together, and units start in LONGEST_FIRST's order, so that no long file starts last and runs alone at the end.
xdist's scheduler itself, given the collection of one run, hands units to stand-in workers."""

from __future__ import annotations

from types import SimpleNamespace

from tests import conftest


class StandInWorker:
    """What xdist's scheduler asks of a worker: take test indexes to run, or shut down."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)  # named in xdist's comparison of the workers' collections
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def files_started(collection: list[str], workers: int) -> list[str]:
    """The files (scopes) in the order xdist's scheduler starts them on `workers` workers that run nothing yet."""
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True),  # xdist's default
                             getvalue=lambda name: [f"{workers}*popen"])
    scheduler = conftest.pytest_xdist_make_scheduler(config, log=None)
    nodes = [StandInWorker(f"gw{k}") for k in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    started = [conftest._test_file(collection[node.sent[0]]) for node in nodes]
    return started + [conftest._test_file(next(iter(unit))) for unit in scheduler.workqueue.values()]


def test_files_start_longest_first_and_the_ray_files_share_one_worker():
    many_short = [f"tests/library/test_sizes.py::test_{k}" for k in range(40)]  # most tests: xdist's own pick
    long_few = [f"tests/webui/test_browser_benchmark.py::test_{k}" for k in range(2)]
    ray = [f"{name}::test_{k}" for name in conftest.RAY_FILES for k in range(3)]
    faults = [f"tests/serve/test_faults.py::test_{k}" for k in range(5)]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in many_short + long_few + ray + faults]
    conftest.pytest_collection_modifyitems(items)
    collection = [item.nodeid for item in items]

    started = files_started(collection, workers=2)
    assert started == [conftest.RAY_FILES[0], "tests/serve/test_faults.py", "tests/webui/test_browser_benchmark.py",
                       "tests/library/test_sizes.py"]  # the second Ray file goes with the first: one unit
