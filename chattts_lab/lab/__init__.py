"""The lab engine: ChatTTS's GPT run by a lean decode loop, in fp32, fp16, bf16, int8 or int4.

`install_lab_engine(chat, device, precision, compile)` converts the loaded GPT one layer at a time into
`LeanLlama` and replaces `chat.gpt.generate` on that instance with `lab_generate`; everything else in
ChatTTS (prompts, speakers, refine, decoder, vocoder) is its own, except that under int8/int4 on a
CPU with native bf16 the decoder's and vocoder's pointwise projections run in bf16 (`vocoder.py`), and
ChatTTS's DVAE (voice-clip encoding only) is reloaded on first use rather than held (`on_demand.py`).
`stream_infer` is the lab's streaming path: it decodes only new frames and emits its first chunk after
a few steps.
"""

from __future__ import annotations

import functools
import logging
import time

import torch

from chattts_lab.lab import kernels
from chattts_lab.lab.engine import (COMPUTE_DTYPE, Heads, LabEngine, drop_stock_code_heads, lab_generate,
                                    quantize_text_tables)
from chattts_lab.lab.linear import int4_available, int8_kernels
from chattts_lab.lab.model import LeanLlama, release_freed_memory
from chattts_lab.lab.on_demand import load_dvae_on_demand
from chattts_lab.lab.stream import stream_infer
from chattts_lab.lab.vocoder import install_bf16_decoding

log = logging.getLogger(__name__)

LAB_EXTRA_PRECISIONS: tuple[str, ...] = ("int4",)

__all__ = ["LAB_EXTRA_PRECISIONS", "lab_unsupported_reason", "install_lab_engine", "stream_infer", "LabEngine"]


def lab_unsupported_reason(device, precision: str) -> str | None:
    """None if the lab engine runs this precision on this device, else a sentence saying why not."""
    device = torch.device(device)
    if precision == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support"
        if device.type == "mps":
            return "the lab engine's bfloat16 path is not built for MPS"
    if precision == "fp16" and device.type == "cpu" and not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN, so float16 matmuls on CPU are unavailable"
    if precision == "int4":
        if device.type != "cpu":
            return "lab int4 runs a CPU int4 kernel (the lab's own on AVX-512 VNNI, else torch's); on GPUs use int8 or bf16"
        if not int4_available() and int8_kernels() is None:  # the lab's own kernel is asked for only where torch has none
            return "this torch build lacks the CPU int4 kernel (_weight_int4pack_mm_for_cpu) and this CPU the lab's own"
    if precision not in ("fp32", "fp16", "bf16", "int8") + LAB_EXTRA_PRECISIONS:
        return f"the lab engine has no {precision!r} precision"
    return None


def _compute_dtype(device: torch.device, precision: str) -> torch.dtype:
    if precision == "int8" and device.type == "cuda":  # weight-only int8: activations in half precision
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return COMPUTE_DTYPE[precision]


def trim_around_the_gpt(chat, precision: str, gpt_folder: str) -> None:
    """What every engine that replaces ChatTTS's GPT generator (lab, onnx) does to the rest of ChatTTS, once its
    `Heads` hold the code heads: drop stock's, decode in bf16 projections under int8/int4 where that pays, and
    keep the DVAE (voice clips only) on disk until first use."""
    drop_stock_code_heads(chat)
    if precision in ("int8", "int4"):  # recorded as the rows' dtype_decoder / dtype_vocos
        install_bf16_decoding(chat, torch.device(chat.device))
    load_dvae_on_demand(chat, gpt_folder)  # synthesis never calls it: 58 MB less resident


def install_lab_engine(chat, device, precision: str, compile: bool = False) -> LabEngine:
    """Convert `chat`'s GPT for the lab engine and route `chat.gpt.generate` through it."""
    device = torch.device(device)
    reason = lab_unsupported_reason(device, precision)
    if reason:
        raise ValueError(f"lab engine, {precision} on {device}: {reason}")
    if device.type == "cpu":
        kernels.load()  # build or load the fused kernels before converting, not between two layers
    t0 = time.perf_counter()
    gpt = chat.gpt
    gpt_device = torch.device(chat.device_gpt)
    gpt_folder = getattr(gpt.gpt.config, "_name_or_path", "")
    with torch.no_grad():
        if precision in ("int8", "int4"):  # first: their fp32 originals must not sit through the GPT's peak
            quantize_text_tables(chat, gpt_device)
        model = LeanLlama(gpt.gpt, precision, gpt_device, _compute_dtype(gpt_device, precision))
        del gpt.gpt  # the fp32 LlamaModel (now emptied layer by layer) goes; nothing else in ChatTTS uses it
        gpt.lab_gpt = model
        heads = Heads(chat.embed, gpt_device, precision)
        trim_around_the_gpt(chat, precision, gpt_folder)
        release_freed_memory()
    engine = LabEngine(model, heads, gpt_device, precision, convert_s=time.perf_counter() - t0)
    engine.compiled = _try_compile(engine, compile)
    gpt.__dict__["generate"] = functools.partial(lab_generate, chat, engine)
    chat.lab_engine = engine
    log.info("lab engine: %s on %s in %.2f s (compiled: %s; kernels: %s)", precision, gpt_device, engine.convert_s,
             engine.compiled, engine.kernels)
    return engine


def _try_compile(engine: LabEngine, requested: bool) -> bool:
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
