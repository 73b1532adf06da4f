"""Python's full garbage collections kept off the path a listener hears.

A process holding ChatTTS and torch keeps about half a million Python objects, and CPython's full (generation 2)
collection walks every one of them while it holds the GIL: in a serving trace on the 2-core VM two came 0.4 s apart,
330-360 ms each, and every stream, the continuous-batching loop and the HTTP threads stood still for both
(docs/measurements/2026-12-04-capacity-trace.md). The serving benchmark's client imports torch too, so its own full
collections delayed the arrivals it timed in the same way.

`settle()` collects once and then freezes what is alive (`gc.freeze`: the imported modules, the loaded model),
so later collections skip it and only walk what was made since. A frozen object is never collected, and a model's
modules sit in reference cycles: `thaw()` before a model is dropped, so that it is freed (models.py does).
A sweep's worker, forked from a server that imported torch and ChatTTS, leaves what it inherited out from its start
(`leave_out_inherited()`).
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


def leave_out_inherited() -> None:
    """In a worker forked from a preloaded server (chattts_lab.sweep.launcher): what it inherited lives as long as it
    does, so it leaves every collection from the start, and a gc.collect (one before each call of a sweep's cell, two
    in the lab's load) walks only what the worker made: about 0.24 s less each on the 2-core Zen 4 VM (the quick
    preset on tiny weights: 28 s -> 19 s). No collection first: the server only imported."""
    gc.freeze()
