"""How the tabs wire their handlers to Gradio's events: `bind` (a handler with its first arguments bound, its
signature kept for Gradio), the concurrency groups model work runs in, each session's stop flags, and the
last-sent-wins rule for displays that several unqueued events fill."""

from __future__ import annotations

import functools
import inspect
import itertools
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


class LatestWins:
    """Last sent wins, for one display that several unqueued events fill from the form's values.

    Gradio runs unqueued events at once, side by side, so a request carrying older values (say, the refresh that
    follows a refused run, sent before the person typed) can end after a newer one and put the old values' result
    back under the new ones. Each request takes a ticket as it arrives; one that a later request of the same session
    has overtaken by the time it ends shows nothing (`gr.skip()`): the newer one shows its own."""

    KEPT_SESSIONS = 1000  # the oldest session's ticket is forgotten past this (a forgotten one just shows again)

    def __init__(self):
        self._lock = threading.Lock()
        self._tickets = itertools.count()
        self._latest: dict = {}

    def arrived(self, request: gr.Request | None) -> int:
        with self._lock:
            ticket = next(self._tickets)
            session = session_of(request)
            self._latest.pop(session, None)  # re-inserted last: the dict stays in order of use
            self._latest[session] = ticket
            if len(self._latest) > self.KEPT_SESSIONS:
                del self._latest[next(iter(self._latest))]
            return ticket

    def shown(self, request: gr.Request | None, ticket: int, value):
        """`value`, or no update where a later request of this session arrived meanwhile (`{}` for a handler that
        answers with a dict of updates, else `gr.skip()`)."""
        with self._lock:
            overtaken = self._latest.get(session_of(request), ticket) != ticket
        if not overtaken:
            return value
        return {} if isinstance(value, dict) else gr.skip()
