"""The engines and their one registry: stock ChatTTS, the lab's decode loop, ONNX Runtime.

Every list of engines or precisions the app, the CLI, the sweep rules, the estimates and the serving choice show
comes from here, so a new engine or precision is one class in one place (`chattts_lab/engines/base.py` says what
an engine provides). An installed engine hangs off the loaded model as `LoadedModel.engine`.
"""

from __future__ import annotations

import functools

import torch

from chattts_lab.engines.base import Engine, EngineRuntime, UnsupportedPrecision, module_dtype
from chattts_lab.engines.lab.cpu import FORCE_ENV as KERNEL_LEVEL_ENV
from chattts_lab.engines.lab.cpu import LEVEL_NAMES as KERNEL_LEVELS
from chattts_lab.engines.precisions import PRECISION, PRECISIONS, QUANTIZED, Precision

ENGINES = ("stock", "lab", "onnx")  # in the order people read them

# The configurations the rest of the lab names, each said once here:
REFERENCE = ("stock", "fp32")  # ChatTTS as shipped: what every gain, fidelity and quality is compared with
DEFAULT_ENGINE, DEFAULT_PRECISION = REFERENCE  # what a configuration that names none runs
# What an app serves before a sweep measured better: the first that runs on the device. Lab int8 streams faster than
# real time on every CPU the lab's kernels are built for (AVX-512 VNNI, AVX-VNNI, AVX2), where lab fp32 does not
# (RTF 1.3 on the AVX-512 machine, 3.3 on an AVX2 one: docs/measurements); its audio differs slightly from stock
# fp32's (lab fp32 computes stock's exactly, a click away in the runtime settings).
SAME_AUDIO_AS_REFERENCE = ("lab", "fp32")  # stock fp32's audio (hidden-state error ~3e-7), faster
SERVED_DEFAULTS = (("lab", "int8"), SAME_AUDIO_AS_REFERENCE, REFERENCE)
FASTEST_UNMEASURED = ("lab", "int4")  # one click away before any sweep: faster still, its audio differs more
# The newcomer's question: how much faster is the lab here, and at what is it fastest? int4 is the lab's fastest on
# every CPU its kernels are built for (stock has none: its row says so, at no cost).
QUICK_SWEEP = (("stock", "lab"), ("fp32", "int8", "int4"))

__all__ = ["ENGINES", "PRECISIONS", "PRECISION", "QUANTIZED", "Precision", "DEFAULT_ENGINE", "DEFAULT_PRECISION",
           "precision_of", "KERNEL_LEVELS", "KERNEL_LEVEL_ENV", "has_own_kernels", "kernel_level_reason", "Engine",
           "EngineRuntime", "UnsupportedPrecision", "REFERENCE", "SAME_AUDIO_AS_REFERENCE", "SERVED_DEFAULTS",
           "FASTEST_UNMEASURED", "QUICK_SWEEP", "all_engines", "check", "get", "served_default", "served_default_reason",
           "module_dtype", "precisions", "unsupported_reason", "runnable_engines", "runnable_precisions"]


@functools.cache
def _registry() -> dict[str, Engine]:
    # imported on first use: the lab's and onnx's packages pull in their kernels and ONNX Runtime
    from chattts_lab.engines.stock import StockEngine
    from chattts_lab.engines.lab import LabEngine
    from chattts_lab.engines.onnx import OnnxEngine

    engines = {e.name: e for e in (StockEngine(), LabEngine(), OnnxEngine())}
    assert tuple(engines) == ENGINES
    return engines


def all_engines() -> list[Engine]:
    return list(_registry().values())


def get(name: str) -> Engine:
    try:
        return _registry()[name]
    except KeyError:
        raise UnsupportedPrecision(f"unknown engine {name!r}: choose from {', '.join(ENGINES)}") from None


def precision_of(name: str) -> Precision:
    """What a precision is (its compute dtype, quantized or not, batch slope, quality cost); the reference
    precision's entry for a name no engine offers (an estimate of a stored row from an older lab)."""
    return PRECISION.get(name, PRECISION[DEFAULT_PRECISION])


def precisions(engine: str) -> tuple[str, ...]:
    return get(engine).precisions


def unsupported_reason(engine: str, device, precision: str) -> str | None:
    """None if the combination can run here, else a sentence saying why not (the one rule table of the lab)."""
    if engine not in ENGINES:
        return f"unknown engine {engine!r}: choose from {', '.join(ENGINES)}"
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r}: choose from {', '.join(PRECISIONS)}"
    reason = get(engine).unsupported_reason(torch.device(device), precision)
    others = [e.name for e in all_engines() if precision in e.precisions]
    if reason and engine not in others:  # say where it does run
        return f"{precision} runs on the {' and '.join(others)} engines only; {reason}"
    return reason


def check(engine: str, device, precision: str) -> None:
    """Raise UnsupportedPrecision with the reason when the combination cannot run here."""
    reason = unsupported_reason(engine, device, precision)
    if reason:
        raise UnsupportedPrecision(f"{precision} on {device} with the {engine} engine: {reason}")


def runnable_precisions(device, engine: str) -> list[str]:
    """The precisions `engine` runs on `device` here, in PRECISIONS order."""
    return [p for p in PRECISIONS if unsupported_reason(engine, device, p) is None]


def served_default(device) -> tuple[str, str]:
    """The (engine, precision) an app serves on `device` before a sweep measured better."""
    return next((e, p) for e, p in SERVED_DEFAULTS if unsupported_reason(e, device, p) is None)


def served_default_reason(device) -> str:
    """Why `served_default(device)` here, in words the page and /v1/audio/voices show (the CPU and its kernels)."""
    engine, precision = served_default(device)
    return get(engine).why_served(torch.device(device), precision)


def has_own_kernels(engine: str, device) -> bool:
    """Whether `engine` runs its own CPU kernels on `device`, whose dispatch level a sweep may force (KERNEL_LEVELS,
    through the KERNEL_LEVEL_ENV variable of the process that loads it)."""
    return engine in ENGINES and get(engine).own_kernels and torch.device(device).type == "cpu"


def kernel_level_reason(level: str) -> str | None:
    """Why this machine cannot run its engines' own kernels at `level` (None when it can)."""
    from chattts_lab.engines.lab.cpu import runnable_levels

    runs = runnable_levels()
    return None if level in runs else f"this CPU cannot run the {level} kernels (it runs {', '.join(runs)})"


def runnable_engines(device) -> list[str]:
    """The engines that run at least one precision on `device` here."""
    return [e for e in ENGINES if runnable_precisions(device, e)]
