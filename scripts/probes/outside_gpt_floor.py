"""The compute floor of the stages outside the GPT's decode steps (issue 44): how many multiply-accumulates the
prefill, the DVAE decoder and Vocos do in the 128-token batch-1 call of scripts/probes/stages_outside_gpt.py, and how
fast the best known kernels run them here, beside what the stages take now. To imitate an AVX2-only CPU:

    CHATTTS_LAB_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
    FBGEMM_ENABLE_INSTRUCTIONS=AVX2 python scripts/probes/outside_gpt_floor.py [repeats]

1. The work is counted, not guessed, during one real call: a torch dispatch mode records every aten GEMM,
   convolution and attention with its real shapes, and forward hooks the lab's int8/int4 (and fbgemm's)
   projections, which aten does not see; hooks on the GPT, the decoder and Vocos's backbone and head say which
   stage each belongs to (the GPT's only for a call of more than one row: the prompt's prefill, not the steps).
2. Each distinct shape is then timed alone on torch's threads (2, as the call), wall clock, best of `repeats`
   interleaved rounds (many_rows.best_ms): the lab's int8 GEMM at this CPU's level, fbgemm's (7-bit activations),
   MKL fp32; a convolution as torch runs it (oneDNN) and, when dense, as an MKL GEMM of its unfolded input; the
   prompt's attention as SDPA. Weights are random (the time does not depend on the values); one weight per shape,
   so it stays in cache: the rates are best cases, which is what a floor wants.
3. Per stage: its time in the real call (best of 8), its MACs by kind, the time of its MAC ops at the rates the
   code runs now, the rest of the stage (norms, GELU, copies, ISTFT, Python: stage minus MAC ops), and the floor:
   every MAC op at the best rate measured for its shape, with and without that rest.
"""
import collections
import os
import sys
import time
from typing import NamedTuple

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn.functional as F
from many_rows import best_ms
from stages_outside_gpt import request
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import (
    FbgemmInt8Linear,
    PackedInt4Linear,
    PackedInt8Linear,
)
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.synthesis import synthesize

PROJECTIONS = (PackedInt8Linear, PackedInt4Linear, FbgemmInt8Linear)  # FloatLinear runs aten's mm: counted there
# "other": what the stage clocks leave outside the GPT, decoder and vocoder (text normalisation, tokenising, the
# prompt's embeddings, glue): no MACs counted, all of it "rest"; the "outside the GPT" includes it
STAGES = {"prefill": "prefill_s", "decoder": "decoder_s", "vocoder": "vocoder_s", "other": "other_s"}
TARGET_S, MEASURED_BEFORE_S = 0.15, 0.252  # issue 44's target; the brief's AVX2 measurement (stages_outside_gpt.py)


class Op(NamedTuple):
    """One kind of MAC op at one shape. linear: (rows, in, out); conv: (input shape, weight shape, stride, padding,
    dilation, groups, channels-last input); attention: (batch, queries, heads, head dim)."""
    stage: str
    kind: str  # "int8 projection" (the module's effective dtype), "fp32 linear", "conv", "depthwise conv", "attention"
    shape: tuple
    macs: int


class OpRecorder(TorchDispatchMode):
    """Counts the aten ops that multiply-accumulate (GEMMs, convolutions, attention) while `stage` is set, however
    they are called (the lab's time-major ConvNeXt blocks call F.conv2d and F.linear, not modules); the lab's own
    int8 GEMM is a C++ extension call that aten does not see, so its modules are hooked (`hook_projections`)."""

    def __init__(self, calls: collections.Counter):
        super().__init__()
        self.calls, self.stage = calls, None

    def begin(self, stage: str | None) -> None:
        """Count from here, for `stage` (None: not at all), until `end`. Entered here, on the thread that runs the
        call (synthesize runs it on its own torch thread, and a dispatch mode holds for one thread)."""
        self.stage = stage
        if stage is not None:
            self.__enter__()

    def end(self) -> None:
        if self.stage is not None:
            self.__exit__(None, None, None)
        self.stage = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.stage is not None and (op := aten_op(self.stage, func.overloadpacket.__name__, args, out)):
            self.calls[op] += 1
        return out


def aten_op(stage: str, name: str, args, out) -> Op | None:
    """The op an aten call was, by the name the dispatch mode sees it under (the composite one: linear, conv1d)."""
    if name in ("linear", "mm", "addmm", "matmul"):
        a, w = (args[0], args[1].T) if name == "linear" else (args[-2], args[-1])
        rows = a.numel() // a.shape[-1]
        return Op(stage, "fp32 linear", (rows, a.shape[-1], w.shape[-1]), rows * a.shape[-1] * w.shape[-1])
    if name in ("conv1d", "conv2d", "convolution"):
        return conv_op(stage, name, args, out)
    if "scaled_dot_product" in name:  # the prompt's causal attention: q.k and p.v up to each query
        b, h, s, d = args[0].shape
        return Op(stage, "attention", (b, s, h, d), 2 * b * h * d * s * (s + 1) // 2)
    return None


def conv_op(stage: str, name: str, args, out) -> Op:
    x, w = args[0], args[1]
    if name == "convolution":  # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        stride, padding, dilation, groups = args[3], args[4], args[5], args[8]
    else:  # conv1d/conv2d's defaults where the call left them out
        stride, padding, dilation, groups = (list(args[3:7]) + [1, 0, 1, 1][len(args[3:7]):])
    channels_last = x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    kind = "depthwise conv" if groups > 1 and groups == x.shape[1] else "conv"
    hashable = lambda v: tuple(v) if isinstance(v, (list, tuple)) else v
    return Op(stage, kind, (tuple(x.shape), tuple(w.shape), hashable(stride), hashable(padding), hashable(dilation),
                            groups, channels_last), out.numel() * w[0].numel())


def hook_projections(model, recorder: OpRecorder) -> list:
    """Forward hooks: the stage markers (prefill only for a call of more than one row) and the projections that
    aten does not see. Returns the handles."""
    roots = {"prefill": [model.engine.gpt_module], "decoder": [model.chat.decoder],
             "vocoder": [model.chat.vocos.backbone, model.chat.vocos.head]}
    handles = []
    for stage, modules in roots.items():
        for root in modules:
            handles.append(root.register_forward_pre_hook(lambda m, args, stage=stage: recorder.begin(
                None if stage == "prefill" and args[0].shape[1] == 1 else stage)))
            handles.append(root.register_forward_hook(lambda m, args, out: recorder.end()))
            for module in root.modules():
                if isinstance(module, PROJECTIONS):
                    handles.append(module.register_forward_hook(lambda m, args, out: recorder.stage and (
                        recorder.calls.update([projection_op(recorder.stage, m, args[0])]))))
    return handles


def projection_op(stage: str, module: nn.Module, x: torch.Tensor) -> Op:
    rows, k = x.numel() // x.shape[-1], x.shape[-1]
    n = module.out_features
    return Op(stage, f"{module.effective_dtype} projection", (rows, k, n), rows * k * n)


def count_ops(model) -> collections.Counter:
    """Op -> calls in one real call."""
    calls = collections.Counter()
    recorder = OpRecorder(calls)
    handles = hook_projections(model, recorder)
    synthesize(model, request())
    for handle in handles:
        handle.remove()
    return calls


def stage_seconds(model, runs: int = 8) -> dict:
    """Each stage's best seconds over `runs` calls (after the counted one, which warmed them): the best, as for the
    kernels' rates, because on a shared machine the neighbours only ever add time."""
    measured = [synthesize(model, request()).measurements for _ in range(runs)]
    return {stage: min(getattr(m.stages, key) for m in measured) for stage, key in STAGES.items()}


def kernels_for(op: Op, lab) -> tuple[str, dict]:
    """(the kernel the code runs now, {kernel: a no-argument call}) for one op at its shape, random values."""
    if op.kind == "attention":
        b, s, h, d = op.shape
        q, k, v = (torch.randn(b, h, s, d) for _ in "qkv")
        return "SDPA", {"SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    if "conv" in op.kind:
        return "oneDNN conv", conv_kernels(op)
    rows, k, n = op.shape
    x, w = torch.randn(rows, k), torch.randn(n, k) * 0.02
    calls = {"MKL fp32": lambda: F.linear(x, w)}
    if op.kind == "fp32 linear":
        return "MKL fp32", calls
    lab_int8, lab_int4, fbgemm = PackedInt8Linear(w, lab), PackedInt4Linear(w, lab), FbgemmInt8Linear(w)
    return "lab int8", {"lab int8": lambda: lab_int8(x), "fbgemm int8": lambda: fbgemm(x), **calls,
                        "lab int4": lambda: lab_int4(x)}


def conv_kernels(op: Op) -> dict:
    """A convolution as torch ran it (same shapes, same input layout) and, when dense, as one MKL GEMM of its
    unfolded input (the same MACs)."""
    x_shape, w_shape, stride, padding, dilation, groups, channels_last = op.shape
    x, w, bias = torch.randn(x_shape), torch.randn(w_shape) * 0.02, torch.randn(w_shape[0])
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    conv = F.conv1d if len(x_shape) == 3 else F.conv2d
    calls = {"oneDNN conv": lambda: conv(x, w, bias, stride, padding, dilation, groups)}
    if op.kind == "depthwise conv" and (split := phase_split(x, w, bias, padding, dilation)) is not None:
        calls["phase split"] = split
    if groups == 1:
        k, n = w[0].numel(), w_shape[0]
        unfolded, w2 = torch.randn(op.macs // (k * n), k), w.reshape(n, k).contiguous()
        calls["MKL fp32"] = lambda: F.linear(unfolded, w2)
    return calls


def phase_split(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, padding, dilation):
    """The decoder's dilated depthwise convolution without dilation: with dilation d, frame t = d * i + j sees only
    frames of its own phase j, so (B, T, C) time-major, viewed as (B, T/d, d, C), is an NHWC image (no copy) that a
    (K, 1) kernel convolves undilated. The same sums (bit for bit held to AVX2, 7e-7 apart on AVX-512 here). A
    candidate rate for the floor, not what the code runs; None where it does not apply."""
    step, frames = dilation[-1], x.shape[-1]
    if step == 1 or frames % step:
        return None
    b, c = x.shape[0], x.shape[1]
    time_major = x.reshape(b, c, frames).transpose(1, 2).contiguous()
    kernel = w.reshape(c, 1, -1, 1)  # (C, 1, K, 1)

    def call():
        image = time_major.view(b, frames // step, step, c).permute(0, 3, 1, 2)  # (B, C, T/d, d), channels-last
        y = F.conv2d(image, kernel, bias, 1, (padding[-1] // step, 0), 1, c)
        return y.permute(0, 2, 3, 1).reshape(b, frames, c)
    return call


def time_ops(ops, repeats: int) -> dict:
    """Op -> (the kernel now, {kernel: best seconds}), at torch's threads, wall clock."""
    lab = kernels.load()
    timed = {}
    with torch.inference_mode():
        for op in ops:
            now, calls = kernels_for(op, lab)
            names = list(calls)
            seconds = best_ms([lambda _, c=calls[n]: c() for n in names], None, repeats, clock=time.perf_counter)
            timed[op] = now, {n: s / 1e3 for n, s in zip(names, seconds)}
    return timed


def print_rates(calls: collections.Counter, timed: dict) -> None:
    names = ("lab int8", "fbgemm int8", "MKL fp32", "oneDNN conv", "phase split", "SDPA", "lab int4")
    print("| stage | op | shape | calls | GMAC a call | " + " | ".join(f"{n} GMAC/s" for n in names) + " |")
    print("|---" * (5 + len(names)) + "|")
    for op, n in calls.items():
        rates = timed[op][1]
        cells = [f"{op.macs / rates[k] / 1e9:.1f}" if k in rates else "" for k in names]
        print(f"| {op.stage} | {op.kind} | {op.shape} | {n} | {op.macs / 1e9:.4f} | " + " | ".join(cells) + " |")


COLUMNS = ("measured ms", "int8-projection GMAC", "other GMAC", "MAC ops at today's kernels ms",
           "rest (measured - MAC ops) ms", "floor: MAC ops at the best int8/fp32 rate ms", "floor + rest ms",
           "int4 projections (lab int4), the rest at the best rate, + rest ms")
NOT_INT8 = {"lab int4"}  # a reference: int4 weights are another format, not a faster int8 kernel


def stage_rows(calls: collections.Counter, timed: dict, measured: dict) -> dict:
    """stage -> the COLUMNS' values (seconds and GMAC)."""
    best = lambda now, s: min(v for k, v in s.items() if k not in NOT_INT8)
    int4 = lambda now, s: s.get("lab int4", best(now, s))
    rows = {}
    for stage, seconds in measured.items():
        ops = [(op, n) for op, n in calls.items() if op.stage == stage]
        total = lambda pick, ops=ops: sum(pick(*timed[op]) * n for op, n in ops)  # pick(kernel now, {kernel: s})
        now, floor = total(lambda now, s: s[now]), total(best)
        rows[stage] = (seconds, sum(op.macs * n for op, n in ops if op.kind.endswith("projection")) / 1e9,
                       sum(op.macs * n for op, n in ops if not op.kind.endswith("projection")) / 1e9,
                       now, seconds - now, floor, floor + seconds - now, total(int4) + seconds - now)
    return rows


def print_floor(rows: dict) -> None:
    print("\n| stage | " + " | ".join(COLUMNS) + " |\n" + "|---" * (len(COLUMNS) + 1) + "|")
    rows = {**rows, "**total**": tuple(map(sum, zip(*rows.values())))}
    for stage, values in rows.items():
        print(f"| {stage} | " + " | ".join(f"{v:.2f}" if "GMAC" in c else f"{v * 1e3:.1f}"
                                            for c, v in zip(COLUMNS, values)) + " |")
    measured, *_, floor, with_rest, int4 = rows["**total**"]
    print(f"\nTarget {TARGET_S * 1e3:.0f} ms; the brief's AVX2 measurement {MEASURED_BEFORE_S * 1e3:.0f} ms; this run "
          f"{measured * 1e3:.0f} ms. Pure MAC floor {floor * 1e3:.0f} ms ({floor / TARGET_S:.2f}x the target); "
          f"keeping today's rest {with_rest * 1e3:.0f} ms ({with_rest / TARGET_S:.2f}x); int4 projections and "
          f"today's rest {int4 * 1e3:.0f} ms ({int4 / TARGET_S:.2f}x).")


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"load average at start: {os.getloadavg()}")
    model = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
    print(f"kernels: {model.effective['kernels']}; torch threads {torch.get_num_threads()}; "
          f"ATen {torch.backends.cpu.get_cpu_capability()}")
    calls = count_ops(model)
    measured = stage_seconds(model)
    timed = time_ops(calls, repeats)
    print_rates(calls, timed)
    print_floor(stage_rows(calls, timed, measured))
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
