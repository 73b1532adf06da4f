"""What the whole app shares: where files go, which model to load, how requests are batched, and the one lock on
model work (sweeps and voice-card jobs hold it while they run, so no request disturbs a sweep's timings; synthesis
requests wait in the app's batcher or scheduler instead, which holds it for each batch or busy spell)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from chattts_lab.serve.policy import BatchPolicy, SchedulerPolicy, ServingPolicy
from chattts_lab.history.store import DEFAULT_DB
from chattts_lab.serve.runtime import ServingChoice, serving_choice


@dataclass(frozen=True)
class AppContext:
    model: str = "auto"
    outputs_dir: Path = Path("outputs")
    history_db: Path = DEFAULT_DB  # the same SQLite history `python -m bench` writes
    api_key: str | None = None  # "user:pass" when the app runs with --auth
    batching: BatchPolicy = BatchPolicy()  # how concurrent requests share batched generations (request-level)
    scheduling: str = ServingPolicy.batching  # continuous: rows join and leave per GPT step; or the batcher above
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
                 scheduling: str = ServingPolicy.batching, rows: SchedulerPolicy = SchedulerPolicy()) -> "AppContext":
        outputs = Path(os.environ.get("CHATTTS_LAB_OUTPUTS", "outputs")).resolve()
        db = Path(os.environ.get("CHATTTS_LAB_HISTORY", DEFAULT_DB)).resolve()
        ctx = AppContext(model=model, outputs_dir=outputs, history_db=db, api_key=api_key, batching=batching,
                         scheduling=scheduling, rows=rows, serving=serving_choice(db, model))
        for folder in (ctx.audio_dir, ctx.voices_dir, ctx.files_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return ctx
