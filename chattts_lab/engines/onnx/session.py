"""The exported GPT behind the lab engine's forward contract, run by an ONNX Runtime session.

`OnnxLlama` offers what the lab's decode loop calls (`reset_cache`, `free_cache`, `forward(emb, positions,
start, mask) -> last hidden [B, dim]`), so batching with per-item stopping, sampling and streaming are the
lab's own. The KV cache lives in ONNX Runtime values allocated once per call at its full length: each layer's
buffer is bound as both past and present, so a step writes its new keys/values in place (no copy of the cache
per step, nothing copied out to numpy). The IO binding is made once per call; a step rebinds only its
embeddings, positions, mask and output. Its threads are fixed per session, so the session is rebuilt when
a call asks for a different thread count; what it runs with is recorded.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from chattts_lab.engines.lab.model import Shape, release_freed_memory
from chattts_lab.engines.onnx.graph import COMPUTE_DTYPES, input_names, output_names

log = logging.getLogger(__name__)

# precision -> the dtype its matrix multiplies hold their weights in (recorded as dtype_gpt)
WEIGHT_DTYPE = {"fp32": "float32", "fp16": "float16", "int8": "int8", "int4": "int4"}


def provider_for(device: torch.device) -> str:
    return "CUDAExecutionProvider" if device.type == "cuda" else "CPUExecutionProvider"


class OnnxLlama(nn.Module):
    """ChatTTS's GPT for generation from an .onnx file: embeddings in, last hidden state (fp32) out."""

    def __init__(self, path: Path, shape: Shape, precision: str, device: torch.device, threads: int):
        super().__init__()
        self.path, self.shape, self.precision, self.device = path, shape, precision, device
        self.built: dict = {}  # export/quantization seconds when this load built the graph; {} when cached
        self.fused = None  # the lab's fused C++ kernels do not apply: ONNX Runtime runs the whole step
        self.session = None
        self.threads = 0
        self.use_threads(threads)
        self.binding = None  # the IO binding of the current call, its KV cache bound in and out
        self.cache: list = []  # onnxruntime.OrtValue [B, H, slots, D] per layer: k.0, v.0, k.1, ...
        self.cached = 0  # positions the cache holds

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
        # cores: while the GPT generates, torch runs the heads and sampling on one thread (onnx_generate).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        self.session = None  # the old session's weights go before the new one loads its own
        self.session = ort.InferenceSession(str(self.path), options, providers=[provider_for(self.device)])
        release_freed_memory(collect=False)  # the load's own buffers (the parsed model) would otherwise stay resident
        self.threads = self.session.get_session_options().intra_op_num_threads
        log.info("onnx session %s on %s with %d threads", self.path.name, self.provider, self.threads)
        return self.threads

    def reset_cache(self, batch: int, length: int) -> None:
        """An empty KV cache of `length` slots for `batch` items, bound as every layer's past and present.

        Its memory is allocated, not written: only the slots a call fills become resident."""
        import onnxruntime as ort

        s = self.shape
        shape = (batch, s.n_heads, length, s.head_dim)
        dtype = COMPUTE_DTYPES.get(self.precision, np.float32)  # int8/int4 graphs are quantized from the fp32 one
        self.cache = [ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, *self._ort_device())
                      for _ in range(2 * s.n_layers)]
        self.binding = self.session.io_binding()
        for past, present, value in zip(input_names(s.n_layers)[3:], output_names(s.n_layers)[1:], self.cache):
            self.binding.bind_ortvalue_input(past, value)
            self.binding.bind_ortvalue_output(present, value)
        self.cached = 0

    def free_cache(self) -> None:
        self.binding, self.cache = None, []

    def _ort_device(self) -> tuple[str, int]:
        return ("cuda", self.device.index or 0) if self.device.type == "cuda" else ("cpu", 0)

    def forward(self, emb: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor | None) -> torch.Tensor:
        """emb: [B, S, dim] for cache slots start..start+S, positions: [B, S] -> last hidden [B, dim] fp32.

        mask: None (no padding: causal) or a boolean [B, 1, S, start+S] (True = attend), as the lab builds it.
        """
        if start != self.cached:
            raise RuntimeError(f"onnx KV cache holds {self.cached} positions, the step starts at {start}")
        B, S, _ = emb.shape
        end = start + S
        if end > self.cache[0].shape()[2]:
            raise RuntimeError(f"onnx KV cache has {self.cache[0].shape()[2]} slots, the step needs {end}")
        if mask is None:
            mask = torch.ones(S, end, dtype=torch.bool, device=emb.device).tril(diagonal=start).expand(B, 1, S, end)
        kind, index = self._ort_device()
        feeds = [emb.float().contiguous(), positions.long().contiguous(), mask.bool().contiguous()]
        hidden = torch.empty(B, self.shape.dim, dtype=torch.float32, device=self.device)
        feeds = [t.to(self.device) for t in feeds]  # held until the run is over: the binding keeps only pointers
        for name, t in zip(input_names(self.shape.n_layers), feeds):
            self.binding.bind_input(name, kind, index, _NUMPY[t.dtype], tuple(t.shape), t.data_ptr())
        self.binding.bind_output("hidden", kind, index, np.float32, tuple(hidden.shape), hidden.data_ptr())
        self.session.run_with_iobinding(self.binding)
        self.cached = end
        return hidden


_NUMPY = {torch.float32: np.float32, torch.int64: np.int64, torch.bool: np.bool_}
