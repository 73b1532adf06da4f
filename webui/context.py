"""What the whole app shares: where files go, which model to load, and the one lock on model work."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from chattts_lab.store import DEFAULT_DB

# Every event that runs the model joins this Gradio concurrency group (limit 1), so a user's Generate
# waits in the queue instead of disturbing a running sweep's timings. The OpenAI-compatible route is
# outside Gradio's queue, so it takes `model_work` as well; the UI handlers take it too.
MODEL_QUEUE = "model"


@dataclass(frozen=True)
class AppContext:
    model: str = "auto"
    outputs_dir: Path = Path("outputs")
    history_db: Path = DEFAULT_DB  # the same SQLite history `python -m bench` writes
    api_key: str | None = None  # "user:pass" when the app runs with --auth
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
    def from_env(model: str, api_key: str | None = None) -> "AppContext":
        outputs = Path(os.environ.get("CHATTTS_LAB_OUTPUTS", "outputs")).resolve()
        db = Path(os.environ.get("CHATTTS_LAB_HISTORY", DEFAULT_DB)).resolve()
        ctx = AppContext(model=model, outputs_dir=outputs, history_db=db, api_key=api_key)
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
    else:
        @functools.wraps(fn)
        def bound(*args, **kwargs):
            return fn(*leading, *args, **kwargs)
    sig = inspect.signature(fn)
    bound.__signature__ = sig.replace(parameters=list(sig.parameters.values())[len(leading):])
    return bound
