"""The exported GPT behind the lab engine's forward contract, run by an ONNX Runtime session.

`OnnxLlama` offers what the lab's decode loop and its continuous-batching rows call (`reset_cache`, `free_cache`,
`caches`, `forward(emb, positions, start, mask) -> last hidden [B, dim]`; engines/lab/engine.py's `DecodeModel`),
so batching with per-item stopping, sampling, streaming and rows that join and leave a running batch are the lab's
own. The KV cache is torch tensors [B, H, slots, D] per layer, as the lab's: ONNX Runtime binds their memory by
pointer, each layer's buffer as both past and present, so a step writes its new keys/values in place (no copy of
the cache per step, nothing copied out to numpy), and the lab's row code moves and copies cache rows with torch
ops on the same memory. The caches are bound when they change (a new call, or a row decoder pointing the model at
other rows); a step rebinds only its embeddings, positions, mask and output. Its threads are fixed per session,
so the session is rebuilt when a call asks for a different thread count; what it runs with is recorded.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from chattts_lab.engines.lab.model import Shape, release_freed_memory
from chattts_lab.engines.precisions import PRECISION
from chattts_lab.engines.onnx.graph import input_names, output_names

log = logging.getLogger(__name__)

# precision -> the dtype its matrix multiplies hold their weights in (recorded as dtype_gpt)
WEIGHT_DTYPE = {"fp32": "float32", "fp16": "float16", "int8": "int8", "int4": "int4"}


def provider_for(device: torch.device) -> str:
    return "CUDAExecutionProvider" if device.type == "cuda" else "CPUExecutionProvider"


class OnnxLlama(nn.Module):
    """ChatTTS's GPT for generation from an .onnx file: embeddings in, last hidden state (fp32) out."""

    rot_table = None  # the lab's contract has one; rotary is computed inside the graph from the positions

    def __init__(self, path: Path, shape: Shape, precision: str, device: torch.device, threads: int):
        super().__init__()
        self.path, self.shape, self.precision, self.device = path, shape, precision, device
        self.built: dict = {}  # export/quantization seconds when this load built the graph; {} when cached
        self.fused = None  # the lab's fused C++ kernels do not apply: ONNX Runtime runs the whole step
        # the graph's activations and KV cache (int8/int4 graphs are quantized from the fp32 one: fp32)
        self.cache_dtype = PRECISION[precision].compute_dtype
        self.session = None
        self.threads = 0
        self.binding = None  # the session's IO binding, its KV cache bound in and out
        # each layer's (k, v) [B, H, slots, D]; the lab's row decoder sets views of some of its rows here
        self.caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._bound = None  # the `caches` list the binding points at: a new list is bound at the next forward
        self.use_threads(threads)

    @property
    def effective_dtype(self) -> str:
        return WEIGHT_DTYPE[self.precision]

    @property
    def weight_bytes(self) -> int:
        """Bytes of the graph's weights as stored (int8 with its scales, int4 packed with its block scales):
        the .onnx file's size, whose graph structure is a few hundred kB of it."""
        return self.path.stat().st_size

    @property
    def provider(self) -> str:
        return self.session.get_providers()[0]

    def use_threads(self, threads: int) -> int:
        """(Re)build the session with `threads` intra-op threads unless it has them; return what it runs with."""
        if threads == self.threads:
            return self.threads
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # the pool threads spin between parallel sections (ONNX Runtime's default), which a decode step's ~160
        # short matmuls need: waking a sleeping thread for each cost 13-20 % of an int4 step (full-size, 2
        # threads, graph only, interleaved: 7.7 ms per step sleeping, 6.6 spinning). They spin on their own
        # cores: while the GPT generates, torch runs the heads and sampling on one thread (OnnxRuntime.generating).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        # ...but only within a run: once a step returns, they stop at once, so that the chunk decodes torch runs
        # between steps (decoder and vocoder, on both cores) do not share them with two spinning threads.
        options.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = self.binding = self._bound = None  # the old session's weights go before the new one loads
        self.session = ort.InferenceSession(str(self.path), options, providers=[provider_for(self.device)])
        release_freed_memory(collect=False)  # the load's own buffers (the parsed model) would otherwise stay resident
        self.threads = self.session.get_session_options().intra_op_num_threads
        log.info("onnx session %s on %s with %d threads", self.path.name, self.provider, self.threads)
        return self.threads

    def reset_cache(self, batch: int, length: int) -> None:
        """An empty KV cache of `length` slots for `batch` items (torch.empty: only the slots a call fills become
        resident), bound as every layer's past and present at the next forward."""
        s = self.shape
        self.caches = [tuple(torch.empty(batch, s.n_heads, length, s.head_dim, dtype=self.cache_dtype,
                                         device=self.device) for _ in "kv") for _ in range(s.n_layers)]

    def free_cache(self) -> None:
        self.caches, self._bound = [], None

    def _ort_device(self) -> tuple[str, int]:
        return ("cuda", self.device.index or 0) if self.device.type == "cuda" else ("cpu", 0)

    def _bind_caches(self) -> None:
        """Bind each layer's cache as its past and present (one buffer: the graph writes the new slots in place),
        unless the binding already points at these tensors."""
        if self.binding is None:
            self.binding = self.session.io_binding()
        if self._bound is self.caches:
            return
        kind, index = self._ort_device()
        tensors = [t for kv in self.caches for t in kv]
        for past, present, t in zip(input_names(self.shape.n_layers)[3:], output_names(self.shape.n_layers)[1:],
                                    tensors):
            if not t.is_contiguous():
                raise ValueError("ONNX Runtime reads a KV cache by pointer: it must be contiguous (whole rows)")
            args = (kind, index, _NUMPY[t.dtype], tuple(t.shape), t.data_ptr())
            self.binding.bind_input(past, *args)
            self.binding.bind_output(present, *args)
        self._bound = self.caches

    def forward(self, emb: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor | None) -> torch.Tensor:
        """emb: [B, S, dim] for cache slots start..start+S, positions: [B, S] -> last hidden [B, dim] fp32.

        mask: None (no padding: causal) or a boolean [B, 1, S, start+S] (True = attend), as the lab builds it. The
        graph writes the new keys/values at slots start..start+S-1, which it reads from the mask's width.
        """
        B, S, _ = emb.shape
        end = start + S
        if mask is None:
            mask = torch.ones(S, end, dtype=torch.bool, device=emb.device).tril(diagonal=start).expand(B, 1, S, end)
        slots = self.caches[0][0].shape[2]
        if mask.shape[-1] != end or end > slots:
            raise RuntimeError(f"onnx step at slots {start}..{end - 1}: its mask covers {mask.shape[-1]} slots, "
                               f"the KV cache has {slots}")
        self._bind_caches()
        kind, index = self._ort_device()
        feeds = [emb.float().contiguous(), positions.long().contiguous(), mask.bool().contiguous()]
        hidden = torch.empty(B, self.shape.dim, dtype=torch.float32, device=self.device)
        feeds = [t.to(self.device) for t in feeds]  # held until the run is over: the binding keeps only pointers
        for name, t in zip(input_names(self.shape.n_layers), feeds):
            self.binding.bind_input(name, kind, index, _NUMPY[t.dtype], tuple(t.shape), t.data_ptr())
        self.binding.bind_output("hidden", kind, index, np.float32, tuple(hidden.shape), hidden.data_ptr())
        self.session.run_with_iobinding(self.binding)
        return hidden


_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64, torch.bool: np.bool_}
