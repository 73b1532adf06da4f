"""What the whole app shares: where files go, its serving policy (which model to load, who may call it, how requests
are batched: the same object Ray Serve deploys from), what it serves by default, and the one lock on
model work (sweeps and voice-card jobs hold it while they run, so no request disturbs a sweep's timings; synthesis
requests wait in the app's batcher or scheduler instead, which holds it for each batch or busy spell)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from chattts_lab.history.store import DEFAULT_DB
from chattts_lab.serve.policy import ServingPolicy
from chattts_lab.serve.runtime import ServingChoice, serving_choice


@dataclass(frozen=True)
class AppContext:
    policy: ServingPolicy = field(default_factory=ServingPolicy)  # the command line's: model, auth, batching, bounds
    outputs_dir: Path = Path("outputs")
    history_db: Path = DEFAULT_DB  # the same SQLite history `python -m bench` writes
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
    def from_env(policy: ServingPolicy) -> "AppContext":
        outputs = Path(os.environ.get("CHATTTS_LAB_OUTPUTS", "outputs")).resolve()
        db = Path(os.environ.get("CHATTTS_LAB_HISTORY", DEFAULT_DB)).resolve()
        ctx = AppContext(policy=policy, outputs_dir=outputs, history_db=db, serving=serving_choice(db, policy.model))
        for folder in (ctx.audio_dir, ctx.voices_dir, ctx.files_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return ctx
