"""The onnx engine: ChatTTS's GPT exported to ONNX and run by ONNX Runtime, in fp32, fp16, int8 or int4.

`OnnxEngine` is its entry in the engine registry (chattts_lab/engines). `install_onnx(chat, device,
precision, threads)` exports the loaded GPT (or reuses the cached export of
the same weights), quantizes it if asked, opens an ONNX Runtime session and routes `chat.gpt.generate` through
the lab engine's decode loop with that session as the forward pass. Everything else in ChatTTS (normaliser,
prompts, speakers, refine, sampling, decoder, vocoder) is its own, as with the lab engine; lab streaming
works unchanged.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import torch

from chattts_lab.engines.base import Engine
from chattts_lab.engines.lab import replace_the_gpt
from chattts_lab.engines.lab.engine import LabRuntime, lab_generate
from chattts_lab.engines.lab.model import Shape
from chattts_lab.engines.onnx.build import ensure_graph, int4_available
from chattts_lab.engines.onnx.session import OnnxLlama, provider_for

log = logging.getLogger(__name__)

__all__ = ["OnnxEngine", "OnnxRuntime", "install_onnx"]


class OnnxEngine(Engine):
    name = "onnx"
    summary = "the lab's decode loop with the GPT exported to ONNX Runtime (README: the onnx engine)"
    continuous_batching_reason = None  # the lab's rows, the session reading their KV cache by pointer (session.py)
    precisions = ("fp32", "fp16", "int8", "int4")
    # the lab engine's figures scaled by onnx/lab in one interleaved sweep (shared/FACTS.md, 2026-12-01: fp32 1.05x,
    # int8 1.43x, int4 1.17x; fp16 ran at about fp32's step on CPU)
    reference_step_ms = {"fp32": 103.0, "fp16": 103.0, "int8": 36.0, "int4": 37.5}
    load_s = 8.0  # opens an ONNX Runtime session (the export and quantization, once per weights, are cached)

    def unsupported_reason(self, device, precision: str) -> str | None:
        if precision == "bf16":  # said plainly rather than as "unknown"
            return "the onnx engine writes fp32 and fp16 graphs and quantizes to int8/int4; it has no bf16 graph"
        return super().unsupported_reason(device, precision)

    def device_reason(self, device: torch.device, precision: str) -> str | None:
        try:
            import onnxruntime
        except ImportError:
            return "onnxruntime is not installed (pip install onnxruntime)"
        if device.type == "mps":
            return "the onnx engine runs on CPU or CUDA; ONNX Runtime's CoreML provider is not wired in"
        provider = provider_for(device)
        if provider not in onnxruntime.get_available_providers():
            return f"this onnxruntime build has no {provider} (install onnxruntime-gpu for CUDA)"
        if precision == "int4" and not int4_available():
            return "this onnxruntime has no MatMulNBits quantizer (onnxruntime.quantization.matmul_nbits_quantizer)"
        return None

    def install(self, chat, device, precision, *, compile, threads) -> "OnnxRuntime":
        return install_onnx(chat, device, precision, threads)


class OnnxRuntime(LabRuntime):
    """The lab's decode loop over an ONNX Runtime session: ONNX Runtime runs the whole GPT step."""

    name = "onnx"
    gpt_module: OnnxLlama

    @contextmanager
    def generating(self):
        """torch on one thread while the GPT generates: ONNX Runtime runs the GPT on its own threads, and between
        two of its steps torch runs the heads and the sampling, small ops that gain nothing from a second thread.
        With two torch threads, torch's OpenMP worker spin-waits for work while ONNX Runtime computes and takes a
        core from it (full-size int4, 2 threads, one process, calls interleaved, under load: 39 ms per step with two
        torch threads, 22 with one)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    @property
    def kernels(self) -> str:
        return f"onnxruntime {self.gpt_module.provider}; {self.sampling}"

    def gpt_weight_bytes(self) -> int:
        return self.gpt_module.weight_bytes  # its weights live in the session, as the .onnx file holds them

    def effective(self) -> dict:
        # ONNX Runtime's own: the provider that runs the graph, its intra-op threads, whether the graph was built now
        gpt = self.gpt_module
        return {"onnx_provider": gpt.provider, "onnx_threads": gpt.threads, "onnx_built": gpt.built}

    def use_threads(self, threads: int) -> dict:
        return {"onnx_threads": self.gpt_module.use_threads(threads)}  # fixed per session: rebuilt when it changes


def install_onnx(chat, device, precision: str, threads: int) -> OnnxRuntime:
    """Build or reuse the ONNX graph of `chat`'s GPT and route `chat.gpt.generate` through it."""
    device = torch.device(device)
    OnnxEngine().check(device, precision)

    def export(llama, gpt_device):
        path, built = ensure_graph(llama, precision)
        shape = Shape.of(llama.config)

        def open_session():
            model = OnnxLlama(path, shape, precision, gpt_device, threads)
            model.built = built
            return model

        return open_session

    engine = replace_the_gpt(chat, precision, export, OnnxRuntime, onnx_generate)
    model = engine.gpt_module
    engine.notes.append(f"onnx graph {model.path}" + (f", built now: {model.built}" if model.built
                                                      else ", reused from the cache"))
    log.info("onnx engine: %s on %s in %.2f s (%s)", precision, model.provider, engine.convert_s, engine.notes[-1])
    return engine


def onnx_generate(chat, engine: OnnxRuntime, *args, **kwargs):
    """The lab's decode loop, each stretch between the chunks it yields inside `engine.generating()` (torch on one
    thread), so that the caller's decoder and vocoder run with its threads in between."""
    generate = lab_generate(chat, engine, *args, **kwargs)
    while True:
        with engine.generating():
            item = next(generate, _DONE)
        if item is _DONE:
            return
        yield item


_DONE = object()
