"""What the whole app shares: where files go, which model to load, and the one lock on model work."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from chattts_lab.serving.batcher import BatchPolicy
from chattts_lab.serving.scheduler import SchedulerPolicy
from chattts_lab.history.store import DEFAULT_DB
from webui.runtime import ServingChoice, serving_choice

# Sweeps and voice-card jobs join this Gradio concurrency group (limit 1) and hold `model_work` while they
# run, so no request disturbs a sweep's timings. Synthesis requests (Generate, /synthesize, /v1) wait in the
# app's batcher instead, which holds `model_work` for each batch.
MODEL_QUEUE = "model"
SYNTHESIS_QUEUE = "synthesis"


@dataclass(frozen=True)
class AppContext:
    model: str = "auto"
    outputs_dir: Path = Path("outputs")
    history_db: Path = DEFAULT_DB  # the same SQLite history `python -m bench` writes
    api_key: str | None = None  # "user:pass" when the app runs with --auth
    batching: BatchPolicy = BatchPolicy()  # how concurrent requests share batched generations (request-level)
    scheduling: str = "continuous"  # lab and onnx: rows join and leave per GPT step; "request": the batcher above
    rows: SchedulerPolicy = SchedulerPolicy()  # continuous batching's rows, and the queue bound for both
    serving: ServingChoice | None = None  # the configuration requests run on by default (None: stock fp32)
    model_work: threading.Lock = field(default_factory=threading.Lock, compare=False)

    @property
    def audio_dir(self) -> Path:
        return self.outputs_dir / "audio"

    @property
    def voices_dir(self) -> Path:
        return self.outputs_dir / "voices"

    @property
    def files_dir(self) -> Path:
        return self.outputs_dir / "files"

    @staticmethod
    def from_env(model: str, api_key: str | None = None, batching: BatchPolicy = BatchPolicy(),
                 scheduling: str = "continuous", rows: SchedulerPolicy = SchedulerPolicy()) -> "AppContext":
        outputs = Path(os.environ.get("CHATTTS_LAB_OUTPUTS", "outputs")).resolve()
        db = Path(os.environ.get("CHATTTS_LAB_HISTORY", DEFAULT_DB)).resolve()
        ctx = AppContext(model=model, outputs_dir=outputs, history_db=db, api_key=api_key, batching=batching,
                         scheduling=scheduling, rows=rows, serving=serving_choice(db, model))
        for folder in (ctx.audio_dir, ctx.voices_dir, ctx.files_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return ctx


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
