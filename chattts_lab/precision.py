"""Precisions: which ones run where, applying them to ChatTTS, and reading back what took effect.

ChatTTS casts hidden states back to float32 before its heads and writes speaker embeddings into
float32 buffers, so casting the whole model fails; only the GPT (about 95 % of the time) changes
precision. The rule table below is the one place that says what is unsupported, and why.
"""

from __future__ import annotations

import logging
import warnings

import torch

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
ENGINES = ("stock", "lab", "onnx")
FLOAT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class UnsupportedPrecision(ValueError):
    """This precision cannot run on this device with this engine; the message says why."""


def unsupported_reason(engine: str, device: torch.device, precision: str) -> str | None:
    """None if the combination can run, else a sentence saying why not."""
    if engine not in ENGINES:
        return f"unknown engine {engine!r}: choose from {', '.join(ENGINES)}"
    if engine == "stock" and precision in extra_precisions("lab") + extra_precisions("onnx"):
        return f"{precision} is a lab-engine precision (and an onnx one); stock ChatTTS has no {precision} path"
    if precision not in PRECISIONS + extra_precisions(engine):
        return f"unknown precision {precision!r}: choose from {', '.join(PRECISIONS + extra_precisions(engine))}"
    if engine == "lab":
        from chattts_lab.lab import lab_unsupported_reason

        return lab_unsupported_reason(device, precision)
    if engine == "onnx":
        from chattts_lab.onnx_engine import onnx_unsupported_reason

        return onnx_unsupported_reason(device, precision)
    return _stock_unsupported_reason(device, precision)


def extra_precisions(engine: str) -> tuple[str, ...]:
    """Precisions beyond the four common ones that only some engines implement."""
    if engine == "lab":
        from chattts_lab.lab import LAB_EXTRA_PRECISIONS

        return LAB_EXTRA_PRECISIONS
    if engine == "onnx":
        from chattts_lab.onnx_engine import ONNX_EXTRA_PRECISIONS

        return ONNX_EXTRA_PRECISIONS
    return ()


def _stock_unsupported_reason(device: torch.device, precision: str) -> str | None:
    if precision == "int8":
        if device.type == "cuda":
            return "stock int8 uses torch's dynamic quantization, which has CPU kernels only"
        if not _has_cpu_int8_kernels():
            return "this torch build has no fbgemm/x86 quantized engine for dynamic int8"
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bfloat16 support"
    if precision == "bf16" and device.type == "mps" and not _mps_has_bf16():
        return "bfloat16 on MPS needs macOS 14 or newer"
    return None


def _has_cpu_int8_kernels() -> bool:
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


def _mps_has_bf16() -> bool:
    check = getattr(torch.backends.mps, "is_macos_or_newer", None)
    return bool(check and check(14, 0))


def apply_stock_precision(chat, precision: str) -> None:
    """Convert ChatTTS's GPT in place the way a user of stock ChatTTS would."""
    gpt = chat.gpt.gpt
    if precision in ("fp16", "bf16"):
        gpt.to(FLOAT_DTYPES[precision])
    elif precision == "int8":
        with warnings.catch_warnings():
            # torch.ao.quantization is deprecated; it is still what stock ChatTTS users reach for,
            # so it stays the stock reference. The lab engine has its own int8 path.
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            chat.gpt.gpt = quantize_dynamic(gpt, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


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


def stock_kernels(chat, precision: str) -> str:
    """The kernels stock ChatTTS's GPT runs here, named as the lab engine names its own."""
    device = torch.device(chat.device_gpt)
    dtype = module_dtype(chat.gpt.gpt)
    if device.type != "cpu":
        return f"{device.type}-matmul {dtype}"
    from chattts_lab.lab import cpu

    # quantize_dynamic's Linear calls the same fbgemm GEMM as the lab's int8 (x86 quantized engine)
    return cpu.fbgemm_int8_kernel() if precision == "int8" else cpu.float_matmul_kernel(dtype)
