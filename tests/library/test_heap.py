"""Full garbage collections kept off the serving path (chattts_lab/heap.py): what is alive at a server's warm-up is
left out of later collections, so is the imported runtime during a model's load, and a model dropped afterwards is
still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from chattts_lab import heap, models
from chattts_lab.models import LoadConfig, load_model

from tests.conftest import TINY


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only a collection frees it


@pytest.fixture
def settled():
    yield
    heap.thaw()  # the rest of the test process collects as usual
    gc.collect()


def test_what_is_alive_when_settled_is_skipped_by_later_collections_until_thawed(settled):
    node = Node()
    gone = weakref.ref(node)
    heap.settle()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert gone() is not None  # frozen: no collection walks it
    heap.thaw()
    gc.collect()
    assert gone() is None


def test_a_model_dropped_after_a_server_settled_leaves_nothing_frozen(settled, monkeypatch):
    """Whatever of the model sits in a reference cycle would never be freed while frozen: dropping it thaws."""
    monkeypatch.setattr(models, "MAX_CACHED", 1)
    models.unload_all()  # a model of its own: one cached by an earlier test may still be held by what that test left
    model = load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1))
    cycle = Node()
    model.chat.held = cycle  # stands for the model's own cycles
    gone = weakref.ref(cycle)
    heap.settle()  # as the app does after its warm-up
    del model, cycle
    models.unload_all()
    assert gc.get_freeze_count() == 0 and gone() is None


def test_a_load_leaves_the_imported_runtime_out_of_its_collections_and_an_eviction_thaws_it(settled, monkeypatch):
    """The lab's conversion collects twice while it loads: what was alive before (torch, ChatTTS) is left out by
    then, so they walk only the new model. Dropping the model thaws everything and frees the model's cycles."""
    monkeypatch.setattr(models, "MAX_CACHED", 1)
    models.unload_all()
    assert gc.get_freeze_count() == 0
    model = load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1))
    assert gc.get_freeze_count() > 100_000  # the imported runtime (about 465,000 objects with torch and ChatTTS)
    cycle = Node()
    model.chat.held = cycle
    gone = weakref.ref(cycle)
    del model, cycle
    models.unload_all()
    assert gc.get_freeze_count() == 0 and gone() is None
