"""What each precision means, said once: the dtype it computes in, whether its weights are integers, how its step
time grows with the batch, and what it costs the ear. Engines say which precisions they run (`Engine.precisions`);
everything else that needs to know what a precision *is* reads `PRECISION[name]` instead of re-deriving it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Precision:
    name: str
    compute_dtype: torch.dtype  # what the GPT's activations compute in on CPU (integer weights: float32 activations)
    quantized: bool  # weights stored as integers with scales (int8, int4): the rest of the model may follow suit
    # Step time at batch b is batch-1's times (1 + batch_slope * (b - 1)): int8 batch 8 is ~1.95x batch 1,
    # fp32 ~2.4-2.8x, bf16 ~4.4x (README tables); the grid's estimates use it until a machine has measured its own.
    batch_slope: float
    quality_cost: str  # what it costs in quality, in words a person picking it reads


# In the order people read them.
_TABLE = (
    Precision("fp32", torch.float32, False, 0.3, "none: the reference precision"),
    Precision("fp16", torch.float16, False, 0.5, "half-precision rounding: tokens drift from fp32's after a while"),
    Precision("bf16", torch.bfloat16, False, 0.5, "coarser rounding than fp16: tokens drift from fp32's sooner"),
    Precision("int8", torch.float32, True, 0.14,
              "weights rounded per channel: the audio differs slightly from fp32's (check fidelity and quality)"),
    Precision("int4", torch.float32, True, 0.14,
              "weights rounded to 16 levels per group: the largest drift (check fidelity and quality)"),
)
PRECISION = {p.name: p for p in _TABLE}
PRECISIONS = tuple(PRECISION)  # every precision any engine offers; an engine runs a subset (`Engine.precisions`)
QUANTIZED = tuple(p.name for p in _TABLE if p.quantized)
