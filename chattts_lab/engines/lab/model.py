"""The lab's lean Llama: ChatTTS's GPT rebuilt for decoding with a static KV cache.

Same maths as transformers' `LlamaModel` (RMSNorm, rotary, causal SDPA), far fewer kernels per step,
because at batch 1 a step is ~12 kernels x 20 layers and each launch costs microseconds:
- q/k/v and gate/up are fused into one projection each;
- q and k rows are permuted once so each rotary pair is adjacent, which turns rotary into one complex
  multiply by a precomputed table (q.k is unchanged by a permutation applied to both);
- the KV cache is preallocated and written in place.
Built one layer at a time from the loaded `LlamaModel`, freeing each fp32 layer once converted.

Decode steps in fp32 on CPU go through fused C++ kernels (`kernels.py`) where they build: one call
for the first RMSNorm, one for rotary + cache write + attention, one for the residual add + RMSNorm and
one for SwiGLU's silu * up, instead of ~30 small ops per layer.
"""

from __future__ import annotations

import ctypes
import gc
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.engines.lab import kernels, kv_cache
from chattts_lab.engines.precisions import PRECISION
from chattts_lab.engines.lab.linear import PackedInt4Linear, PackedInt8Linear, make_linear

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Shape:
    dim: int
    n_layers: int
    n_heads: int
    head_dim: int
    eps: float

    @staticmethod
    def of(config) -> "Shape":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        if config.num_key_value_heads != config.num_attention_heads:
            raise ValueError("the lab engine expects as many key/value heads as query heads (ChatTTS's GPT)")
        return Shape(config.hidden_size, config.num_hidden_layers, config.num_attention_heads, head_dim, config.rms_norm_eps)


def pair_rotary_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder q/k projection rows per head from [x1 | x2] halves to interleaved (x1_j, x2_j) pairs."""
    out, dim = weight.shape
    head_dim = out // n_heads
    return weight.view(n_heads, 2, head_dim // 2, dim).transpose(1, 2).reshape(out, dim)


@contextmanager
def layer_weights(llama):
    """Yield get(name) -> fp32 tensor, e.g. get("layers.3.mlp.up_proj.weight").

    The loaded LlamaModel's weights are lazily mmapped: touching them would keep every page resident
    for as long as the model lives. Reading each tensor through a short-lived safetensors handle instead
    copies just that tensor, so converting holds about one layer of fp32 at a time.
    """
    folder = Path(getattr(llama.config, "_name_or_path", "") or "")
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if len(files) != 1:
        params = dict(llama.named_parameters())
        yield lambda name: params[name].detach()
        return
    from safetensors import safe_open

    with safe_open(str(files[0]), framework="pt") as f:
        keys = {k.removeprefix("model."): k for k in f.keys()}

    def get(name: str) -> torch.Tensor:
        with safe_open(str(files[0]), framework="pt") as f:  # closed at once: its mapped pages go with it
            return f.get_tensor(keys[name])

    yield get


def release_freed_memory(collect: bool = True) -> None:
    """Hand freed heap pages back to the OS (glibc keeps conversion temporaries otherwise)."""
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim


def free_layer(llama, i: int) -> None:
    """Drop fp32 layer i as soon as it is converted. Its tensors' storage goes at once: the module sits in
    reference cycles, and a gc.collect() per layer cost ~0.4 s each in a process holding ChatTTS."""
    old = llama.layers[i]
    for t in [*old.parameters(), *old.buffers()]:
        t.data = torch.empty(0, dtype=t.dtype, device=t.device)
    llama.layers[i] = nn.Identity()
    release_freed_memory(collect=False)


def cache_dtype(precision: str, dtype: torch.dtype) -> torch.dtype:
    """The KV cache's dtype: int8 lines (kv_cache.py) under int8/int4 weights with fp32 activations, else the
    activations' own.

    A step reads the whole cache of every item (at 8 rows and 100 positions a quarter of the step, bound by memory),
    and int8/int4 tokens already differ from fp32's by far more than rounding k and v to 8 bits per line adds
    (docs/measurements/2026-12-05-int8-kv-cache.md); fp32 keeps an fp32 cache, so lab fp32 computes what stock fp32
    computes.
    """
    return torch.int8 if PRECISION[precision].quantized and dtype == torch.float32 else dtype


class Block(nn.Module):
    def __init__(self, get, prefix: str, shape: Shape, precision: str, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.shape, self.dtype = shape, dtype
        w = lambda name: get(f"{prefix}.{name}.weight")
        self.norm1 = nn.Parameter(w("input_layernorm").to(device, dtype).clone(), requires_grad=False)
        self.norm2 = nn.Parameter(w("post_attention_layernorm").to(device, dtype).clone(), requires_grad=False)
        h = shape.n_heads
        qkv = torch.cat([pair_rotary_rows(w("self_attn.q_proj"), h), pair_rotary_rows(w("self_attn.k_proj"), h), w("self_attn.v_proj")])
        self.qkv = make_linear(qkv, precision, device, dtype)
        del qkv
        self.o = make_linear(w("self_attn.o_proj"), precision, device, dtype)
        gate_up = torch.cat([w("mlp.gate_proj"), w("mlp.up_proj")])
        self.gate_up = make_linear(gate_up, precision, device, dtype)
        del gate_up
        self.down = make_linear(w("mlp.down_proj"), precision, device, dtype)

    def forward(self, x, rot, k_cache, v_cache, start: int, end: int, mask, causal: bool, fused=None):
        # x: [B, S, dim]; rot: complex [B, S, 1, 1, D/2]; caches: [B, H, T, D] (int8: lines, kv_cache.py); fused: the
        # lab's kernels or None
        B, S, dim = x.shape
        H, D = self.shape.n_heads, self.shape.head_dim
        qkv = self.qkv(F.rms_norm(x, (dim,), self.norm1, self.shape.eps)).view(B, S, 3, H, D)
        qk = torch.view_as_complex(qkv[:, :, :2].float().reshape(B, S, 2, H, D // 2, 2)) * rot
        qk = torch.view_as_real(qk).to(self.dtype).view(B, S, 2, H, D)
        kv_cache.write(k_cache, start, qk[:, :, 1].transpose(1, 2), fused)
        kv_cache.write(v_cache, start, qkv[:, :, 2].transpose(1, 2), fused)
        y = F.scaled_dot_product_attention(  # a narrow cache is widened for the prompt's attention
            qk[:, :, 0].transpose(1, 2), kv_cache.read(k_cache, end, qk.dtype, fused),
            kv_cache.read(v_cache, end, qk.dtype, fused), attn_mask=mask, is_causal=causal and mask is None,
        )
        x = x + self.o(y.transpose(1, 2).reshape(B, S, dim))
        return self.mlp(x, F.rms_norm(x, (dim,), self.norm2, self.shape.eps))

    def mlp(self, x, normed):
        g, u = self.gate_up(normed).chunk(2, -1)
        return x + self.down(F.silu(g) * u)

    def decode_fused(self, fused, x, rot, k_cache, v_cache, slot: int, end: int, valid):
        """One new token per item with the fused kernels. x: [B, 1, dim] fp32; rot: [B, D/2, 2] (cos, sin)."""
        B, _, dim = x.shape
        eps = self.shape.eps
        qkv = self.qkv(fused.rms_norm(x, self.norm1, eps))
        y = fused.decode_attention(qkv.view(B, -1), rot, k_cache, v_cache, slot, end, valid)
        x, normed = fused.add_rms_norm(x, self.o(y.view(B, 1, dim)), self.norm2, eps)
        return x + self.down(fused.silu_mul(self.gate_up(normed)))


class LeanLlama(nn.Module):
    """ChatTTS's GPT for generation: embeddings in, last hidden state (fp32) out, KV cache inside."""

    def __init__(self, llama, precision: str, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.shape = Shape.of(llama.config)
        self.dtype, self.device, self.precision = dtype, device, precision
        rotary = llama.rotary_emb
        self.register_buffer("inv_freq", rotary.inv_freq.detach().float().to(device).clone(), persistent=False)
        self.rope_scaling = float(rotary.attention_scaling)
        layers = []
        with layer_weights(llama) as get:
            for i in range(self.shape.n_layers):
                layers.append(Block(get, f"layers.{i}", self.shape, precision, device, dtype))
                free_layer(llama, i)
            self.norm = nn.Parameter(get("norm.weight").to(device, dtype).clone(), requires_grad=False)
        self.layers = nn.ModuleList(layers)
        release_freed_memory()
        self.caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.cache_dtype = cache_dtype(precision, dtype)
        self.rot_table: torch.Tensor | None = None
        self.fused = kernels.load() if device.type == "cpu" and dtype == torch.float32 else None
        self.packed_step = self._packed_step_weights()

    def _packed_step_weights(self):
        """(the flat weight list, the projections' output sizes) for `decode_step_packed` when every projection
        is the lab's own int8 or int4 (PackedInt8Linear, PackedInt4Linear), else None (the step runs layer by layer)."""
        names = ("qkv", "o", "gate_up", "down")
        if self.fused is None or not all(isinstance(getattr(b, n), (PackedInt8Linear, PackedInt4Linear))
                                         for b in self.layers for n in names):
            return None
        flat = []
        for b in self.layers:  # the order decode_step_packed reads them in
            qkv, o, gate_up, down = (getattr(b, n).tensors for n in names)
            flat += [b.norm1, *qkv, *o, b.norm2, *gate_up, *down]
        return flat, [getattr(self.layers[0], n).out_features for n in names]

    @property
    def effective_dtype(self) -> str:
        return getattr(self.layers[0].qkv, "effective_dtype", str(self.dtype).replace("torch.", ""))

    def reset_cache(self, batch: int, length: int) -> None:
        """Preallocate the KV cache and the rotary table for `length` slots/positions.

        torch.empty: cache pages never written are never resident, so a large max_new_token is cheap.
        """
        s = self.shape
        self.caches = [
            tuple(kv_cache.allocate(batch, s.n_heads, length, s.head_dim, self.cache_dtype, self.device) for _ in "kv")
            for _ in range(s.n_layers)
        ]
        freqs = torch.arange(length, device=self.device).float()[:, None] * self.inv_freq  # as transformers
        self.rot_table = torch.polar(torch.full_like(freqs, self.rope_scaling), freqs)

    def free_cache(self) -> None:
        self.caches, self.rot_table = [], None

    def forward(self, emb: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor | None) -> torch.Tensor:
        """emb: [B, S, dim] for cache slots start..start+S, positions: [B, S] -> last hidden [B, dim] fp32.

        mask: None (no padding) or a boolean [B, 1, S, start+S] (True = attend).
        """
        x = emb.to(self.dtype)
        end = start + x.shape[1]
        if self.fused is not None and x.shape[1] == 1:
            return self._decode_fused(x, positions, start, end, mask)
        rot = self.rot_table[positions][:, :, None, None]
        causal = x.shape[1] > 1
        for layer, (k, v) in zip(self.layers, self.caches):
            x = layer(x, rot, k, v, start, end, mask, causal, self.fused)
        return F.rms_norm(x[:, -1], (self.shape.dim,), self.norm, self.shape.eps).float()

    def _decode_fused(self, x, positions, start: int, end: int, mask) -> torch.Tensor:
        rot = torch.view_as_real(self.rot_table[positions[:, 0]]).contiguous()  # [B, D/2, 2]
        valid = mask.view(mask.shape[0], -1) if mask is not None else torch.empty(0, dtype=torch.bool)
        if self.packed_step is not None:  # the whole step in one C++ call
            layers, out = self.packed_step
            caches = [c for kv in self.caches for c in kv]
            return self.fused.decode_step_packed(x.contiguous(), layers, out, caches, rot, start, end, valid,
                                                 self.shape.eps, self.norm)
        for layer, (k, v) in zip(self.layers, self.caches):
            x = layer.decode_fused(self.fused, x, rot, k, v, start, end, valid)
        return self.fused.rms_norm(x[:, -1], self.norm, self.shape.eps)
