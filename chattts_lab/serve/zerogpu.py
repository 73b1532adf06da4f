"""Hugging Face ZeroGPU: the GPU is lent per call, only inside functions decorated with `@spaces.GPU(duration=...)`.

On a ZeroGPU Space (`spaces` importable and `SPACES_ZERO_GPU` set by the Space) exactly two functions hold the GPU:
`gpu_synthesize` here (one person's request, every batch of it) and `gpu_sweep` (a sweep with CUDA cells, beside the
sweep it runs: webui/benchmark/sweep_run.py), both decorated with `gpu`. Each asks for
a duration from the request's size (`synthesis_seconds`, `sweep_seconds`); a request that would need more than the
limit (`max_duration_s`) is refused before it is queued, with what to change. Everywhere else (`spaces` absent, a
CPU Space, a laptop) `gpu` returns the function as it is and the app serves as always.

Not run on a real ZeroGPU Space yet: the limits and the GPU's speed below are estimates (README, "As a Space").
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Callable

from chattts_lab.requests import InvalidRequest, SynthesisRequest, validate_request
from chattts_lab.trackers.env import cpu_info, gpu_info, usable_cores

DEFAULT_MAX_S = 120  # what a free account may ask for per call, as this app assumes (HF sets the real limit)
START_S = 20.0  # a call's fixed cost: the lent GPU attached, the weights moved onto it, ChatTTS warmed
GPU_STEPS_PER_S = 25.0  # GPT steps per second assumed for a ZeroGPU slice at batch 1 (an estimate, on the slow side)
DECODE_S = 3.0  # DVAE decoder and Vocos for one batch

DECORATED: dict[str, Callable] = {}  # name -> the function as decorated: what holds the GPU on ZeroGPU


class OverGpuLimit(InvalidRequest):
    """A request that would need the lent GPU longer than ZeroGPU allows; the message says what to change."""


def spaces_installed() -> bool:
    try:
        import spaces  # noqa: F401
    except ImportError:
        return False
    return True


def active() -> bool:
    """On a ZeroGPU Space: the `spaces` package is there and the Space says ZeroGPU."""
    return spaces_installed() and os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def max_duration_s() -> int:
    return int(os.environ.get("CHATTTS_LAB_ZEROGPU_MAX_S", DEFAULT_MAX_S))


def gpu(duration: Callable[..., float]):
    """`@spaces.GPU(duration=duration)` where `spaces` is installed (a no-op off ZeroGPU), else the function as it
    is. `duration` is called with the function's own arguments. Every function so decorated is listed in DECORATED."""
    def decorate(fn):
        wrapped = fn
        if spaces_installed():
            import spaces

            wrapped = spaces.GPU(duration=lambda *a, **kw: min(duration(*a, **kw), max_duration_s()))(fn)
        DECORATED[fn.__name__] = wrapped
        return wrapped
    return decorate


def check_duration(seconds: float, what: str, change: str) -> None:
    """Refuse, before anything waits for the GPU, what ZeroGPU would cut off."""
    if active() and seconds > max_duration_s():
        raise OverGpuLimit(f"{what} needs about {seconds:.0f} s of GPU time, over the {max_duration_s()} s ZeroGPU "
                           f"lends this Space per call: {change}")


def synthesis_seconds(cfg, requests: list[SynthesisRequest]) -> float:
    """GPU seconds one person's request needs: a call's start, then each batch's steps (its rows step together)."""
    return START_S + sum(r.max_new_token / GPU_STEPS_PER_S + DECODE_S for r in requests)


def synthesis_change(requests: list[SynthesisRequest]) -> str:
    fit = int((max_duration_s() - START_S) / len(requests) - DECODE_S) * GPU_STEPS_PER_S
    return (f"lower 'max audio tokens' to {max(int(fit), 0)} or less, or send a shorter text (it makes "
            f"{len(requests)} batch(es))")


@gpu(duration=synthesis_seconds)
def gpu_synthesize(cfg, requests: list[SynthesisRequest]):
    """Every batch of one request on the lent GPU: [(SynthesisOutput, model facts)], the facts picklable (ZeroGPU
    runs this in a process of its own and sends the result back)."""
    from chattts_lab import load_model, synthesize

    model = load_model(cfg)  # loaded once per ZeroGPU worker process (START_S pays it), then cached there
    facts = SimpleNamespace(source=model.source, synthetic=model.synthetic)
    return [(synthesize(model, validate_request(r)), facts) for r in requests]


def hardware_line() -> str:
    """What the page says it runs on."""
    cpu = cpu_info()
    if active():
        return (f"Runs on **ZeroGPU**: a GPU slice lent for each request (up to {max_duration_s()} s a call); the "
                "model waits on the CPU between requests.")
    gpus = "; ".join(g["name"] for g in gpu_info())
    where = "a **CPU Space**" if os.environ.get("SPACE_ID") else "**this machine**"
    return (f"Runs on {where}: {cpu['model']}, {usable_cores()} usable core(s)"
            + (f", GPU {gpus}" if gpus else ", no GPU") + ".")


async def serve(ctx, settings, requests: list[SynthesisRequest]) -> list:
    """One person's request on the lent GPU (all its batches in one call): [(SynthesisOutput, model facts)]."""
    import asyncio
    from dataclasses import replace

    cfg = replace(settings, device="cuda").load_config(ctx.policy.model)
    check_duration(synthesis_seconds(cfg, requests), "This request", synthesis_change(requests))
    return await asyncio.to_thread(gpu_synthesize, cfg, requests)
