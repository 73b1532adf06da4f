"""The lab's lean Llama: ChatTTS's GPT rebuilt for decoding with a static KV cache.

Same maths as transformers' `LlamaModel` (RMSNorm in fp32, rotary with half rotation, SDPA), fewer
kernels per step: q/k/v and gate/up are fused into one projection each, rotary runs once over q and k
together, and the KV cache is preallocated so a step appends in place instead of concatenating.
Built one layer at a time from the loaded `LlamaModel`, freeing each fp32 layer once converted.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.lab.linear import make_linear

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


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().to(dtype).clone(), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # as transformers: normalise in fp32, scale in the compute dtype
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Block(nn.Module):
    def __init__(self, layer, shape: Shape, precision: str, device: torch.device, dtype: torch.dtype):
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.shape = shape
        self.norm1 = RMSNorm(layer.input_layernorm.weight, shape.eps, dtype)
        self.norm2 = RMSNorm(layer.post_attention_layernorm.weight, shape.eps, dtype)
        qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        self.qkv = make_linear(qkv, precision, device, dtype)
        del qkv
        self.o = make_linear(attn.o_proj.weight, precision, device, dtype)
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        self.gate_up = make_linear(gate_up, precision, device, dtype)
        del gate_up
        self.down = make_linear(mlp.down_proj.weight, precision, device, dtype)

    def forward(self, x, cos, sin, k_cache, v_cache, start: int, end: int, mask, causal: bool):
        # x: [B, S, dim]; cos/sin: [B, S, 1, 1, D]; caches: [B, H, T, D]
        B, S, _ = x.shape
        H, D = self.shape.n_heads, self.shape.head_dim
        qkv = self.qkv(self.norm1(x)).view(B, S, 3, H, D)
        qk = qkv[:, :, :2]
        half = D // 2
        qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), -1) * sin
        q = qk[:, :, 0].transpose(1, 2)
        k_cache[:, :, start:end] = qk[:, :, 1].transpose(1, 2)
        v_cache[:, :, start:end] = qkv[:, :, 2].transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask, is_causal=causal and mask is None
        )
        x = x + self.o(y.transpose(1, 2).reshape(B, S, H * D))
        g, u = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class LeanLlama(nn.Module):
    """ChatTTS's GPT for generation: embeddings in, last hidden state (fp32) out, KV cache inside."""

    def __init__(self, llama, precision: str, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.shape = Shape.of(llama.config)
        self.dtype = dtype
        self.device = device
        self.precision = precision
        rotary = llama.rotary_emb
        self.register_buffer("inv_freq", rotary.inv_freq.detach().float().to(device).clone(), persistent=False)
        self.rope_scaling = float(rotary.attention_scaling)
        layers = []
        for i in range(len(llama.layers)):
            layers.append(Block(llama.layers[i], self.shape, precision, device, dtype))
            llama.layers[i] = nn.Identity()  # drop the fp32 layer now: conversion stays at one layer's worth
            gc.collect()
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(llama.norm.weight, self.shape.eps, dtype)
        self.caches: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def effective_dtype(self) -> str:
        return getattr(self.layers[0].qkv, "effective_dtype", str(self.dtype).replace("torch.", ""))

    def reset_cache(self, batch: int, length: int) -> None:
        """Preallocate the KV cache. torch.empty: pages never written are never resident."""
        s = self.shape
        self.caches = [
            (
                torch.empty(batch, s.n_heads, length, s.head_dim, dtype=self.dtype, device=self.device),
                torch.empty(batch, s.n_heads, length, s.head_dim, dtype=self.dtype, device=self.device),
            )
            for _ in range(s.n_layers)
        ]

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # positions: [B, S] -> cos, sin: [B, S, 1, 1, D], computed as transformers does (fp32, then cast)
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        cos = (emb.cos() * self.rope_scaling).to(self.dtype)
        sin = (emb.sin() * self.rope_scaling).to(self.dtype)
        return cos[:, :, None, None], sin[:, :, None, None]

    def forward(self, emb: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor | None) -> torch.Tensor:
        """emb: [B, S, dim] for cache slots start..start+S; returns the last position's hidden [B, dim] fp32.

        mask: None (no padding) or a boolean [B, 1, S, start+S] (True = attend).
        """
        x = emb.to(self.dtype)
        end = start + x.shape[1]
        cos, sin = self.rope(positions)
        causal = x.shape[1] > 1
        for layer, (k, v) in zip(self.layers, self.caches):
            x = layer(x, cos, sin, k, v, start, end, mask, causal)
        return self.norm(x[:, -1]).float()
