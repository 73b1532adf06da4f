"""How the tabs wire their handlers to Gradio's events: `bind` (a handler with its first arguments bound, its
signature kept for Gradio), the concurrency groups model work runs in, and each session's stop flags."""

from __future__ import annotations

import functools
import inspect
import threading
from dataclasses import dataclass

import gradio as gr

# Sweeps and voice-card jobs join this Gradio concurrency group (limit 1) and hold `model_work` while they
# run, so no request disturbs a sweep's timings. Synthesis requests (Generate, /synthesize, /v1) wait in the
# app's batcher instead, which holds `model_work` for each batch.
MODEL_QUEUE = "model"
SYNTHESIS_QUEUE = "synthesis"


def session_of(request: gr.Request | None) -> str | None:
    """The browser session an event came from (None for a call without one: the Python client, a test)."""
    return request.session_hash if request else None


def bind(fn, *leading):
    """`fn` with its first arguments (the app context, a tab's components) bound, for use as a Gradio handler.

    Unlike functools.partial, the result keeps `fn`'s other annotations and defaults, which Gradio reads to
    inject gr.Request and gr.Progress (a partial hides them, and the request silently arrives as None) and
    to give API parameters their names and defaults.
    """
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def bound(*args, **kwargs):
            yield from fn(*leading, *args, **kwargs)
    elif inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def bound(*args, **kwargs):
            async for item in fn(*leading, *args, **kwargs):
                yield item
    elif inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def bound(*args, **kwargs):
            return await fn(*leading, *args, **kwargs)
    else:
        @functools.wraps(fn)
        def bound(*args, **kwargs):
            return fn(*leading, *args, **kwargs)
    sig = inspect.signature(fn)
    bound.__signature__ = sig.replace(parameters=list(sig.parameters.values())[len(leading):])
    return bound


@dataclass
class StopFlags:
    """Per-session stop requests for running sweeps and serving runs (Stop sets one; the run polls it)."""

    _flags: dict

    def start(self, session: str) -> threading.Event:
        self._flags[session] = flag = threading.Event()
        return flag

    def stop(self, session: str) -> bool:
        flag = self._flags.get(session)
        if flag is None:
            return False
        flag.set()
        return True

    def done(self, session: str) -> None:
        self._flags.pop(session, None)
