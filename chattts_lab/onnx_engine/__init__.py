"""The onnx engine: ChatTTS's GPT exported to ONNX and run by ONNX Runtime, in fp32, fp16, int8 or int4.

`install_onnx_engine(chat, device, precision, threads)` exports the loaded GPT (or reuses the cached export of
the same weights), quantizes it if asked, opens an ONNX Runtime session and routes `chat.gpt.generate` through
the lab engine's decode loop with that session as the forward pass. Everything else in ChatTTS (normaliser,
prompts, speakers, refine, sampling, decoder, vocoder) is its own, as with the lab engine; lab streaming
works unchanged.
"""

from __future__ import annotations

import functools
import logging
import time

import torch

from chattts_lab.lab import trim_around_the_gpt
from chattts_lab.lab.engine import Heads, LabEngine, lab_generate, quantize_text_tables
from chattts_lab.lab.model import Shape, release_freed_memory
from chattts_lab.onnx_engine.build import ensure_graph, int4_available
from chattts_lab.onnx_engine.session import OnnxLlama, provider_for

log = logging.getLogger(__name__)

ONNX_EXTRA_PRECISIONS: tuple[str, ...] = ("int4",)

__all__ = ["ONNX_EXTRA_PRECISIONS", "onnx_unsupported_reason", "install_onnx_engine"]


def onnx_unsupported_reason(device, precision: str) -> str | None:
    """None if the onnx engine runs this precision on this device, else a sentence saying why not."""
    device = torch.device(device)
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed (pip install onnxruntime)"
    if device.type == "mps":
        return "the onnx engine runs on CPU or CUDA; ONNX Runtime's CoreML provider is not wired in"
    provider = provider_for(device)
    if provider not in onnxruntime.get_available_providers():
        return f"this onnxruntime build has no {provider} (install onnxruntime-gpu for CUDA)"
    if precision == "bf16":
        return "the onnx engine writes fp32 and fp16 graphs and quantizes to int8/int4; it has no bf16 graph"
    if precision == "int4" and not int4_available():
        return "this onnxruntime has no MatMulNBits quantizer (onnxruntime.quantization.matmul_nbits_quantizer)"
    if precision not in ("fp32", "fp16", "int8") + ONNX_EXTRA_PRECISIONS:
        return f"the onnx engine has no {precision!r} precision"
    return None


def install_onnx_engine(chat, device, precision: str, threads: int) -> LabEngine:
    """Build or reuse the ONNX graph of `chat`'s GPT and route `chat.gpt.generate` through it."""
    device = torch.device(device)
    reason = onnx_unsupported_reason(device, precision)
    if reason:
        raise ValueError(f"onnx engine, {precision} on {device}: {reason}")
    t0 = time.perf_counter()
    gpt = chat.gpt
    gpt_device = torch.device(chat.device_gpt)
    path, built = ensure_graph(gpt.gpt, precision)
    shape = Shape.of(gpt.gpt.config)
    gpt_folder = getattr(gpt.gpt.config, "_name_or_path", "")
    del gpt.gpt  # the torch GPT goes before the session opens: both at once would be the load's peak
    with torch.no_grad():
        if precision in ("int8", "int4"):  # as the lab engine: int8 text tables (130 MB of fp32 otherwise)
            quantize_text_tables(chat, gpt_device)
        heads = Heads(chat.embed, gpt_device, precision)
        trim_around_the_gpt(chat, precision, gpt_folder)
    release_freed_memory()  # collects the GPT (its modules sit in reference cycles) before the session opens
    model = OnnxLlama(path, shape, precision, gpt_device, threads)
    model.built = built
    gpt.lab_gpt = model
    engine = LabEngine(model, heads, gpt_device, precision, convert_s=time.perf_counter() - t0)
    engine.notes.append(f"onnx graph {path}" + (f", built now: {built}" if built else ", reused from the cache"))
    gpt.__dict__["generate"] = functools.partial(onnx_generate, chat, engine)
    chat.lab_engine = engine  # lab streaming, stage timing and the roofline find the engine here
    log.info("onnx engine: %s on %s in %.2f s (%s)", precision, model.provider, engine.convert_s, engine.notes[-1])
    return engine


def onnx_generate(chat, engine: LabEngine, *args, **kwargs):
    """The lab's decode loop with torch on one thread while it runs (restored between the chunks it yields).

    ONNX Runtime runs the GPT on its own threads; between two of its steps torch runs the heads and the
    sampling, small ops that gain nothing from a second thread. With two torch threads, torch's OpenMP worker
    spin-waits for work while ONNX Runtime computes and takes a core from it (full-size int4, 2 threads, one
    process, calls interleaved, under load: 39 ms per step with two torch threads, 22 with one).
    """
    generate = lab_generate(chat, engine, *args, **kwargs)
    while True:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            item = next(generate)
        except StopIteration:
            return
        finally:
            torch.set_num_threads(threads)
        yield item
