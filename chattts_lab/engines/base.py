"""What every engine is: a description of what it runs where (`Engine`) and the runtime it installs on a loaded
ChatTTS (`EngineRuntime`), which answers everything the rest of the lab asks of a loaded model's GPT.

Nothing outside `chattts_lab/engines/` (and the engines' own packages) branches on an engine's name: it asks the
registry (`chattts_lab.engines`) or the runtime that hangs off the loaded model (`LoadedModel.engine`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ContextManager, Protocol

import numpy as np
import torch


class UnsupportedPrecision(ValueError):
    """This precision cannot run on this device with this engine; the message says why."""


class Engine(ABC):
    """One way of running ChatTTS's GPT. Subclasses fill in the class attributes and the two methods."""

    name: str
    summary: str  # one line for the page and `--list`
    precisions: tuple[str, ...]
    # Estimate constants (reference machine: full-size weights, batch 1, 2 threads, N=128); a machine's own
    # history replaces them as soon as it has measured cells (chattts_lab/sweep/grid.py).
    reference_step_ms: dict[str, float]
    load_s: float
    # Why a running generation cannot admit new rows (continuous batching); None for an engine whose decode loop can.
    continuous_batching_reason: str | None = "its generation runs a batch from start to end"
    # Whether it runs the lab's own CPU kernels, built per dispatch level (engines/lab/cpu.py), which a sweep may force.
    own_kernels: bool = False

    def unsupported_reason(self, device: torch.device, precision: str) -> str | None:
        """None if this engine runs `precision` on `device`, else a sentence saying why not."""
        if precision not in self.precisions:
            return f"the {self.name} engine has no {precision} path (it runs {', '.join(self.precisions)})"
        return self.device_reason(torch.device(device), precision)

    @abstractmethod
    def device_reason(self, device: torch.device, precision: str) -> str | None:
        """Why a precision this engine has cannot run on this device (None when it can)."""

    def why_served(self, device: torch.device, precision: str) -> str:
        """Why this engine and precision are what an app serves by default on `device` (engines.SERVED_DEFAULTS)."""
        return f"{self.name} {precision}"

    def compile_at_load(self, device: torch.device, requested: bool) -> bool:
        """Whether ChatTTS's own loader should torch.compile the GPT (engines that replace it compile their own)."""
        return False

    def compile_ignored_reason(self, device: torch.device) -> str | None:
        """Why a compile=True cell on `device` would only repeat the compile=off one (None when it would not)."""
        return None

    @abstractmethod
    def install(self, chat, device: torch.device, precision: str, *, compile: bool, threads: int) -> "EngineRuntime":
        """Make `chat` generate with this engine; return the runtime the loaded model keeps."""

    def check(self, device: torch.device, precision: str) -> None:
        reason = self.unsupported_reason(device, precision)
        if reason:
            raise UnsupportedPrecision(f"{precision} on {device} with the {self.name} engine: {reason}")


class EngineRuntime(ABC):
    """An engine installed on one loaded ChatTTS: what took effect, and the hooks a call uses."""

    name: str
    precision: str
    compiled: bool = False
    notes: list  # what a person should know about this install (compile ignored, graph reused, ...)
    # True when the engine streams by itself (new frames only, first chunk early): `stream(...)` is then used
    streams_incrementally: bool = False

    @property
    @abstractmethod
    def kernels(self) -> str:
        """Which kernels a decode step runs, as results record them."""

    @property
    @abstractmethod
    def gpt_dtype(self) -> str:
        """The dtype the GPT's weights compute in ('qint8', 'int8', 'int4', 'float32', ...)."""

    @abstractmethod
    def weight_bytes_per_step(self) -> int:
        """Bytes of GPT weights one audio-code decode step reads (chattts_lab/trackers/roofline.py says what is counted)."""

    @abstractmethod
    def reporting_steps_to(self, recorder) -> ContextManager[None]:
        """A context manager: for one call, `recorder.gpt_forward_done()` after every GPT forward pass."""

    def effective(self) -> dict:
        """Engine-specific facts a result records beside the common ones (e.g. ONNX Runtime's provider)."""
        return {}

    def use_threads(self, threads: int) -> dict:
        """Follow one call's thread count where the engine fixes threads itself; return what changed."""
        return {}

    def stream(self, chat, texts: list[str], params_refine, params_code, **kwargs):
        raise NotImplementedError(f"the {self.name} engine streams through ChatTTS's own infer(stream=True)")

    def row_decoder(self, chat, max_rows: int) -> "RowDecoder | None":
        """A decoder of up to `max_rows` rows that join and leave a running generation (continuous batching), or
        None where this engine's generation cannot admit rows (its `Engine.continuous_batching_reason` says why)."""
        return None


class RowDecoder(Protocol):
    """What a continuous-batching scheduler drives (chattts_lab/serve/scheduler.py): rows of a running
    generation, each one text with its own prompt, sampling settings and voice, and each row's audio. One thread
    drives it. A row (`admit`'s or `begin`'s answer) has `generated` (audio tokens kept), `ended` (None, or why it
    ended: "eos", "max_new_token", or what its caller sets, such as "stopped"), `steps`, `prefill_s`, `prefilled`
    (prompt positions in its cache so far), `prompt` (its `length`: positions), `owner` and `meta` (the caller's)."""

    rows: int  # rows in all
    active: list  # the rows generating now
    filling: object  # the row being prefilled (`begin` to its last `fill`), or None: it holds a row, steps with none
    hold: int  # trailing tokens whose audio waits for their right context (decode_spans cuts before them)

    @property
    def free(self) -> int: ...

    def prompt(self, text: str, params_refine, params_code, refine: bool, normalize: bool):
        """One text's prompt as ChatTTS's `infer` builds it (normalized, refined when asked, speaker, settings)."""

    def admit(self, prompt, owner=None):
        """Prefill `prompt` into a free row and sample its first token; it steps from the next `step()` on."""

    def begin(self, prompt, owner=None):
        """Take a free row for `prompt` and prefill nothing yet (chunked prefill: `fill`); one row at a time."""

    def fill(self, row, positions: int | None = None) -> bool:
        """Prefill the next `positions` of the row's prompt (None: the rest), between steps that do not wait for
        all of it; with its last, sample its first token: the row is active from the next `step()` on (True)."""

    def step(self) -> list:
        """One GPT step for every active row; the rows that ended at it."""

    def release(self, row) -> None:
        """Free the row now (an active one, or the one being prefilled)."""

    def reset(self) -> None:
        """Drop every row (after a failure inside a step, whose state is then unknown)."""

    def decode_spans(self, spans: list[tuple[object, int, int]]) -> list[np.ndarray]:
        """Samples [a, b) of each (row, a, b)'s audio: chunks of a stream that join into the whole clip. The spans
        of rows due together come in one call, so that an engine can decode them in one batch."""

    def audio(self, row) -> np.ndarray:
        """The row's whole clip, decoded at once."""


def module_dtype(module: torch.nn.Module) -> str:
    """The dtype a module computes its weights in, as recorded in results ('qint8' for quantized)."""
    for sub in module.modules():
        custom = getattr(sub, "effective_dtype", None)  # lab modules say what they compute in
        if custom:
            return custom
        if "quantized" in type(sub).__module__:
            return "qint8"
        weight = getattr(sub, "weight", None)
        if isinstance(weight, torch.Tensor):
            return str(weight.dtype).replace("torch.", "")
    for p in module.parameters():
        return str(p.dtype).replace("torch.", "")
    return "none"
