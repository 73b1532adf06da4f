"""All of a process's model work runs on one thread: `run(fn, ...)`, `@on_torch_thread` and `relay(generator)`.

Why: torch's CPU kernels use OpenMP (libgomp), which keeps a pool of worker threads for every thread that starts
parallel regions. Once a second thread has a pool, libgomp manages more threads than there are CPUs, stops
spinning between regions and puts its workers to sleep, so each of a decode step's many short regions pays a
wake-up. On 2 cores the lab engine's decode step took 12 ms on the only pool's thread and 29 ms once another thread
had run torch (docs/measurements/2026-12-02-openmp-pools.md). A web server calls from many threads (Gradio's
workers, the batcher's, the continuous-batching loop's), so every call that runs a model (load, warm-up, synthesis,
the loop's busy spells, a sweep worker's task) is handed to this one thread, and one pool exists.

A call made on the torch thread itself runs at once, so model work may call model work. A caller takes the locks
it needs (the app's `model_work`) before it hands work over, never inside the handed-over work: the torch thread
must never wait for a thread that waits for it.
"""

from __future__ import annotations

import functools
import queue
import threading
from concurrent.futures import Future
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
_END = object()


class _TorchThread:
    """One daemon thread that runs the jobs handed to it in turn. Not a ThreadPoolExecutor: its threads are
    joined when the interpreter exits, so a Ctrl-C during a long generation would wait for the generation."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def is_current(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, fn: Callable[..., T], *args, **kwargs) -> Future:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="torch", daemon=True)
                self._thread.start()
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def _work(self) -> None:
        while True:
            future, fn, args, kwargs = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # the caller re-raises it in its own thread
                future.set_exception(exc)


_TORCH = _TorchThread()


def is_torch_thread() -> bool:
    return _TORCH.is_current()


def run(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) on the torch thread (at once when called there), its result or its exception here."""
    if _TORCH.is_current():
        return fn(*args, **kwargs)
    return _TORCH.submit(fn, *args, **kwargs).result()


def on_torch_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """A function whose every call runs on the torch thread."""
    @functools.wraps(fn)
    def handed_over(*args, **kwargs):
        return run(fn, *args, **kwargs)

    return handed_over


def relay(make: Callable[..., Iterator[T]], *args, **kwargs) -> Iterator[T]:
    """Iterate make(*args, **kwargs) on the torch thread and yield its items here as they come.

    The producer never waits for this consumer (items queue up), so a consumer that stops early cannot block the
    torch thread; the generation then runs to its end or to its caller's stop event."""
    if _TORCH.is_current():
        yield from make(*args, **kwargs)
        return
    items: queue.SimpleQueue = queue.SimpleQueue()

    def produce() -> None:
        try:
            for item in make(*args, **kwargs):
                items.put((item, None))
        except BaseException as exc:
            items.put((_END, exc))
            return
        items.put((_END, None))

    _TORCH.submit(produce)
    while True:
        item, exc = items.get()
        if exc is not None:
            raise exc
        if item is _END:
            return
        yield item
