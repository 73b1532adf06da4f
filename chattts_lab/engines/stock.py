"""The stock engine: ChatTTS's own `GPT.generate` over its transformers `LlamaModel`, converted the way a user of
stock ChatTTS would convert it.

ChatTTS casts hidden states back to float32 before its heads and writes speaker embeddings into float32 buffers,
so casting the whole model fails; only the GPT (about 95 % of the time) changes precision.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from chattts_lab.engines.base import Engine, EngineRuntime, module_dtype
from chattts_lab.engines.precisions import PRECISION


class StockEngine(Engine):
    name = "stock"
    summary = "ChatTTS's own Chat.infer, untouched (the reference)"
    continuous_batching_reason = "stock ChatTTS generates a batch from start to end inside `infer`: it cannot admit rows"
    precisions = ("fp32", "fp16", "bf16", "int8")
    reference_step_ms = {"fp32": 122.0, "bf16": 66.0, "fp16": 66.0, "int8": 56.0}
    load_s = 2.0  # README: 1.7 s on full-size weights

    def device_reason(self, device: torch.device, precision: str) -> str | None:
        if precision == "int8":
            if device.type != "cpu":
                return "stock int8 uses torch's dynamic quantization, which has CPU kernels only"
            if not any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm")):
                return "this torch build has no fbgemm/x86 quantized engine for dynamic int8"
        if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support"
        if precision == "bf16" and device.type == "mps" and not _mps_has_bf16():
            return "bfloat16 on MPS needs macOS 14 or newer"
        return None

    def compile_at_load(self, device: torch.device, requested: bool) -> bool:
        return bool(requested and device.type == "cuda")  # ChatTTS ignores compile off CUDA: say it did not run

    def compile_ignored_reason(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return ("stock ChatTTS silently ignores compile=True off CUDA, so this cell would repeat the "
                    "compile=off one")
        return None

    def install(self, chat, device, precision, *, compile, threads) -> "StockRuntime":
        self.check(device, precision)
        apply_stock_precision(chat, precision)
        return StockRuntime(chat, precision, compiled=self.compile_at_load(torch.device(device), compile))


def _mps_has_bf16() -> bool:
    check = getattr(torch.backends.mps, "is_macos_or_newer", None)
    return bool(check and check(14, 0))


def apply_stock_precision(chat, precision: str) -> None:
    """Convert ChatTTS's GPT in place the way a user of stock ChatTTS would."""
    gpt = chat.gpt.gpt
    if not PRECISION[precision].quantized:
        gpt.to(PRECISION[precision].compute_dtype)  # fp32 stays as loaded
    elif precision == "int8":
        with warnings.catch_warnings():
            # torch.ao.quantization is deprecated; it is still what stock ChatTTS users reach for,
            # so it stays the stock reference. The lab engine has its own int8 path.
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            chat.gpt.gpt = quantize_dynamic(gpt, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


class StockRuntime(EngineRuntime):
    name = "stock"

    def __init__(self, chat, precision: str, compiled: bool):
        self.chat, self.precision, self.compiled = chat, precision, compiled
        self.notes = []

    @property
    def gpt(self) -> torch.nn.Module:
        return self.chat.gpt.gpt

    @property
    def gpt_dtype(self) -> str:
        return module_dtype(self.gpt)

    @property
    def kernels(self) -> str:
        """The kernels stock ChatTTS's GPT runs here, named as the lab engine names its own."""
        device = torch.device(self.chat.device_gpt)
        if device.type != "cpu":
            return f"{device.type}-matmul {self.gpt_dtype}"
        from chattts_lab.engines.lab import cpu

        # quantize_dynamic's Linear calls the same fbgemm GEMM as the lab's int8 (x86 quantized engine)
        return cpu.fbgemm_int8_kernel() if self.precision == "int8" else cpu.float_matmul_kernel(self.gpt_dtype)

    def weight_bytes_per_step(self) -> int:
        from chattts_lab.trackers.roofline import module_weight_bytes

        return module_weight_bytes(self.gpt) + sum(module_weight_bytes(h) for h in self.chat.embed.head_code)

    @contextmanager
    def reporting_steps_to(self, recorder):
        hook = self.gpt.register_forward_hook(lambda *_: recorder.gpt_forward_done())
        try:
            yield
        finally:
            hook.remove()
