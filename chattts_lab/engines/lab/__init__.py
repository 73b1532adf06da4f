"""The lab engine: ChatTTS's GPT run by a lean decode loop, in fp32, fp16, bf16, int8 or int4.

`LabEngine` is its entry in the engine registry (chattts_lab/engines). `install_lab(chat, device,
precision, compile)` converts the loaded GPT one layer at a time into
`LeanLlama` and replaces `chat.gpt.generate` on that instance with `lab_generate`; everything else in
ChatTTS (prompts, speakers, refine, decoder, vocoder) is its own, except that under int8/int4 the
decoder's and vocoder's pointwise projections run in int8 (or bf16; `vocoder.py`), and
ChatTTS's DVAE (voice-clip encoding only) is reloaded on first use rather than held (`on_demand.py`).
`stream_infer` is the lab's streaming path: it decodes only new frames and emits its first chunk after
a few steps.
"""

from __future__ import annotations

import functools
import logging
import time

import torch

from chattts_lab.engines.base import Engine
from chattts_lab.said import Said
from chattts_lab.engines.precisions import PRECISION
from chattts_lab.engines.lab import cpu, kernels, time_major
from chattts_lab.engines.lab.engine import (Heads, LabRuntime, drop_stock_code_heads, lab_generate,
                                    quantize_text_tables)
from chattts_lab.engines.lab.linear import int4_available, int8_kernels
from chattts_lab.engines.lab.model import LeanLlama, release_freed_memory
from chattts_lab.engines.lab.on_demand import load_dvae_on_demand
from chattts_lab.engines.lab.vocoder import install_quantized_decoding

log = logging.getLogger(__name__)

__all__ = ["LabEngine", "LabRuntime", "install_lab", "replace_the_gpt"]


class LabEngine(Engine):
    name = "lab"
    summary = "this project's decode loop over the same weights (README: the lab engine)"
    precisions = ("fp32", "fp16", "bf16", "int8", "int4")
    # the README's "Measured" tables (tests/sweep/test_grid.py holds them to it); int4 from its own kernels' ratio to
    # int8 at the AVX2 level (6.9 / 9.2 ms a step: docs/measurements/2026-12-04-every-cpu-kernels.md), where torch's
    # int4 kernel, measured before, had been slower than int8 (32 ms)
    reference_step_ms = {"fp32": 98.0, "bf16": 54.0, "fp16": 54.0, "int8": 25.3, "int4": 19.0}
    load_s = 6.0  # converts the GPT layer by layer (and builds the kernels once per machine)
    continuous_batching_reason = None  # its decode loop admits rows at any step (engines/lab/continuous.py)
    own_kernels = True  # kernels.py: one build per dispatch level

    def device_reason(self, device: torch.device, precision: str) -> str | None:
        if precision == "bf16":
            if device.type == "cuda" and not torch.cuda.is_bf16_supported():
                return "this GPU has no bfloat16 support"
            if device.type == "mps":
                return "the lab engine's bfloat16 path is not built for MPS"
        if precision == "fp16" and device.type == "cpu" and not torch.backends.mkldnn.is_available():
            return "this torch build has no oneDNN, so float16 matmuls on CPU are unavailable"
        if precision == "int4":
            if device.type != "cpu":
                return ("lab int4 runs a CPU int4 kernel (the lab's own where its kernels build, else torch's); "
                        "on GPUs use int8 or bf16")
            if not int4_available() and int8_kernels() is None:  # the lab's own kernel is asked for only where torch has none
                return ("this torch build lacks the CPU int4 kernel (_weight_int4pack_mm_for_cpu), and the lab's own kernels "
                        "could not be built here (no C++ compiler, or CHATTTS_LAB_KERNELS=off)")
        return None

    def why_served(self, device: torch.device, precision: str) -> str:
        if device.type != "cpu":
            return super().why_served(device, precision)
        level = cpu.kernel_level()
        if not kernels.buildable():
            return Said("lab {precision} on torch's and fbgemm's kernels ({why})", precision=precision,
                        why=kernels.unbuildable_reason())
        return Said("{cpu}: lab {precision} on the lab's {level} kernels", cpu=cpu.describe(level), precision=precision,
                    level=level)

    def install(self, chat, device, precision, *, compile, threads) -> LabRuntime:
        return install_lab(chat, device, precision, compile)


def _compute_dtype(device: torch.device, precision: str) -> torch.dtype:
    if precision == "int8" and device.type == "cuda":  # weight-only int8: activations in half precision
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return PRECISION[precision].compute_dtype


def trim_around_the_gpt(chat, precision: str, gpt_folder: str) -> None:
    """What every engine that replaces ChatTTS's GPT generator (lab, onnx) does to the rest of ChatTTS, once its
    `Heads` hold the code heads: drop stock's, decode in int8 (or bf16) projections under int8/int4 where that
    pays, run the decoder and Vocos time-major on CPUs (the same audio, fewer copies), and keep the DVAE (voice
    clips only) on disk until first use."""
    drop_stock_code_heads(chat)
    if PRECISION[precision].quantized:  # recorded as the rows' dtype_decoder / dtype_vocos
        install_quantized_decoding(chat, torch.device(chat.device))
    if torch.device(chat.device).type == "cpu":  # (where it was measured: docs/measurements/2026-12-04-decode-layout.md)
        time_major.set_installed(chat)
    load_dvae_on_demand(chat, gpt_folder)  # synthesis never calls it: 58 MB less resident


def install_lab(chat, device, precision: str, compile: bool = False) -> LabRuntime:
    """Convert `chat`'s GPT for the lab engine and route `chat.gpt.generate` through it."""
    device = torch.device(device)
    LabEngine().check(device, precision)
    if device.type == "cpu":
        kernels.load()  # build or load the fused kernels before converting, not between two layers

    def convert(llama, gpt_device):  # layer by layer: the fp32 LlamaModel empties as the lean one fills
        model = LeanLlama(llama, precision, gpt_device, _compute_dtype(gpt_device, precision))
        return lambda: model

    engine = replace_the_gpt(chat, precision, convert, LabRuntime, lab_generate)
    engine.compiled = _try_compile(engine, compile)
    log.info("lab engine: %s on %s in %.2f s (compiled: %s; kernels: %s)", precision, engine.device,
             engine.convert_s, engine.compiled, engine.kernels)
    return engine


def replace_the_gpt(chat, precision: str, open_gpt, runtime_class, generate) -> LabRuntime:
    """The recipe of every engine that runs ChatTTS's GPT in the lab's decode loop (lab, onnx).

    `open_gpt(llama, device)` turns ChatTTS's transformers GPT into the decode loop's model (converting it, or
    exporting it) and returns a callable that gives that model once the original has been freed: the text
    tables are made int8 first and the original GPT goes before the new one opens, so the load's peak memory
    never holds both. Then `chat.gpt.generate` is routed through `generate(chat, runtime, ...)`.
    """
    t0 = time.perf_counter()
    gpt = chat.gpt
    gpt_device = torch.device(chat.device_gpt)
    gpt_folder = getattr(gpt.gpt.config, "_name_or_path", "")
    with torch.no_grad():
        if PRECISION[precision].quantized:  # first: their fp32 originals must not sit through the GPT's peak
            quantize_text_tables(chat, gpt_device)
        pending = open_gpt(gpt.gpt, gpt_device)
        del gpt.gpt  # nothing else in ChatTTS uses its LlamaModel
        heads = Heads(chat.embed, gpt_device, precision)
        trim_around_the_gpt(chat, precision, gpt_folder)
    release_freed_memory()  # collects the GPT (its modules sit in reference cycles) before the new one opens
    model = pending()
    gpt.lab_gpt = model  # a submodule of ChatTTS's GPT, so ChatTTS's unload frees it with the rest
    engine = runtime_class(model, heads, gpt_device, precision, convert_s=time.perf_counter() - t0)
    gpt.__dict__["generate"] = functools.partial(generate, chat, engine)
    return engine


def _try_compile(engine: LabRuntime, requested: bool) -> bool:
    """torch.compile the decoder blocks on CUDA; report True only if a compiled forward actually ran."""
    if not requested:
        return False
    if engine.device.type != "cuda":
        engine.notes.append("compile ignored off CUDA: on CPU it measured no gain (fbgemm int8 is not traced)")
        log.warning(engine.notes[-1])
        return False
    model = engine.gpt_module
    eager = [layer.forward for layer in model.layers]
    try:
        for layer in model.layers:
            layer.forward = torch.compile(layer.forward, dynamic=True)
        model.reset_cache(1, 8)
        x = torch.zeros(1, 2, model.shape.dim, device=engine.device)
        model(x, torch.arange(2, device=engine.device)[None], 0, None)
        model(x[:, :1], torch.full((1, 1), 2, device=engine.device), 2, None)
        model.free_cache()
        return True
    except Exception as exc:  # any compiler failure: run eager and say so
        for layer, fwd in zip(model.layers, eager):
            layer.forward = fwd
        engine.notes.append(f"torch.compile failed, running eager: {type(exc).__name__}: {exc}")
        log.warning(engine.notes[-1])
        return False
