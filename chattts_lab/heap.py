"""Python's full garbage collections kept off the path a listener hears.

A process holding ChatTTS and torch keeps about half a million Python objects, and CPython's full (generation 2)
collection walks every one of them while it holds the GIL: in a serving trace on the 2-core VM two came 0.4 s apart,
330-360 ms each, and every stream, the continuous-batching loop and the HTTP threads stood still for both
(docs/measurements/2026-12-04-capacity-trace.md). The serving benchmark's client imports torch too, so its own full
collections delayed the arrivals it timed in the same way.

`settle()` collects once and then freezes what is alive (`gc.freeze`: the imported modules, the loaded model),
so later collections skip it and only walk what was made since. A frozen object is never collected, and a model's
modules sit in reference cycles: `thaw()` before a model is dropped, so that it is freed (models.py does).
Loading a model first leaves what is alive out (`leave_out_alive()`: the imported runtime), so the load's own
collections (the lab's conversion makes two) walk only the new model.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """After loading and warming up: collect, then leave what is alive now out of every later collection."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Before dropping long-lived objects (a model): make them collectable again."""
    gc.unfreeze()


def leave_out_alive() -> None:
    """Before a model's load (models.py): leave what is alive now out of later collections, without collecting first.
    What is alive then is the imported runtime (torch, ChatTTS and the app: 465,000-610,000 objects, of which a
    collection right after importing frees about 20), or what an eviction has just collected; the load's collections
    then take about 0.25-0.4 s less each on the 2-core Zen 4 VM (a sweep's quick preset on tiny weights: 28 s -> 19 s).
    An eviction thaws it all again, with the model it drops."""
    gc.freeze()
