"""Every call that runs a model runs on the one torch thread, whichever thread asks (chattts_lab.torch_thread):
with a second OpenMP pool, libgomp stops spinning and the lab engine's decode step ran 2.4x slower on 2 cores.

The threads are observed where the model works: a stop event's `is_set` is read at every GPT step (synthesize)
and between the continuous loop's steps, so a recording event names the thread that stepped."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from chattts_lab import SynthesisRequest, torch_thread
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.serve.batch import Part
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler
from chattts_lab.synthesis import synthesize, synthesize_stream

from tests.conftest import TINY

REQUEST = SynthesisRequest.of("Which thread steps this?", max_new_token=6, min_new_token=6)


class StepWitness(threading.Event):
    """A stop event that is never set and records which thread read it."""

    def __init__(self):
        super().__init__()
        self.readers: set[str] = set()

    def is_set(self) -> bool:
        self.readers.add(threading.current_thread().name)
        return super().is_set()


def from_threads(call, count: int = 2) -> list[StepWitness]:
    """Run call(witness) on `count` fresh threads (a pool of one each), one after another; their witnesses."""
    witnesses = []
    for _ in range(count):
        witness = StepWitness()
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(call, witness).result(timeout=600)  # a failure in the thread is raised here
        witnesses.append(witness)
    return witnesses


@pytest.fixture(scope="module")
def lab_model():
    return load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1))


def test_synthesis_from_any_thread_steps_on_the_torch_thread(lab_model):
    whole = from_threads(lambda stop: synthesize(lab_model, REQUEST, stop=stop))
    streamed = from_threads(lambda stop: list(synthesize_stream(lab_model, REQUEST, stop=stop)))
    assert [w.readers for w in whole + streamed] == [{"torch"}] * 4


def test_the_continuous_loop_steps_on_the_torch_thread(lab_model):
    scheduler = ContinuousScheduler(lambda: lab_model, SchedulerPolicy(max_rows=2))
    witnesses = from_threads(lambda stop: scheduler.submit(Part(REQUEST, stop)).result(timeout=600))
    assert all(w.readers for w in witnesses)
    # submit reads nothing; the loop's own thread only waits for arrivals: every read is a busy spell's
    assert set().union(*(w.readers for w in witnesses)) == {"torch"}


def test_a_stream_yields_in_order_and_raises_where_it_is_read():
    def count_then_fail():
        yield from range(3)
        raise ValueError("the generation failed")

    items = torch_thread.relay(count_then_fail)
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="the generation failed"):
        next(items)


def test_work_handed_over_from_the_torch_thread_runs_at_once_rather_than_waiting_for_itself():
    def outer():
        return torch_thread.run(lambda: threading.current_thread().name), torch_thread.is_torch_thread()

    assert torch_thread.run(outer) == ("torch", True)
    assert not torch_thread.is_torch_thread()
