"""ChatTTS's GPT as one ONNX graph: embeddings, positions, mask and past KV in; last hidden state and present KV out.

The same graph serves prefill (S prompt positions, empty past) and decode (S = 1). The maths is transformers'
`LlamaModel` (RMSNorm in float32, rotate-half rotary, softmax attention, SiLU MLP), written with plain
matmuls so that every exporter and every ONNX Runtime provider runs it. q/k/v and gate/up are fused into one
projection each: fewer, larger matrix multiplies, which is what the quantizers and MLAS do best.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from chattts_lab.lab.model import Shape


def input_names(n_layers: int) -> list[str]:
    return ["emb", "positions", "mask"] + [f"past_{kv}.{i}" for i in range(n_layers) for kv in "kv"]


def output_names(n_layers: int) -> list[str]:
    return ["hidden"] + [f"present_{kv}.{i}" for i in range(n_layers) for kv in "kv"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _linear(weight: torch.Tensor) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    layer.weight = nn.Parameter(weight.detach().float().contiguous(), requires_grad=False)
    return layer


class ExportBlock(nn.Module):
    def __init__(self, layer, shape: Shape):
        super().__init__()
        self.shape = shape
        attn, mlp = layer.self_attn, layer.mlp
        self.norm1 = nn.Parameter(layer.input_layernorm.weight.detach().float(), requires_grad=False)
        self.norm2 = nn.Parameter(layer.post_attention_layernorm.weight.detach().float(), requires_grad=False)
        self.qkv = _linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        self.o = _linear(attn.o_proj.weight)
        self.gate_up = _linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        self.down = _linear(mlp.down_proj.weight)

    def forward(self, x, cos, sin, bias, past_k, past_v):
        # x: [B, S, dim]; cos/sin: [B, 1, S, D]; bias: [B, 1, S, P+S]; past: [B, H, P, D]
        B, S, dim = x.shape
        H, D = self.shape.n_heads, self.shape.head_dim
        qkv = self.qkv(rms_norm(x, self.norm1, self.shape.eps)).view(B, S, 3, H, D)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, S, D]
        q = q * cos + rotate_half(q) * sin
        k = torch.cat([past_k, k * cos + rotate_half(k) * sin], dim=2)
        v = torch.cat([past_v, v], dim=2)
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(D)) + bias
        y = torch.matmul(F.softmax(scores, dim=-1), v)  # [B, H, S, D]
        x = x + self.o(y.transpose(1, 2).reshape(B, S, dim))
        g, u = self.gate_up(rms_norm(x, self.norm2, self.shape.eps)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u), k, v


class ExportLlama(nn.Module):
    """Built from a loaded transformers `LlamaModel`; shares its weights except the fused projections."""

    def __init__(self, llama):
        super().__init__()
        self.shape = Shape.of(llama.config)
        rotary = llama.rotary_emb
        self.register_buffer("inv_freq", rotary.inv_freq.detach().float().clone(), persistent=False)
        self.rope_scaling = float(rotary.attention_scaling)
        self.layers = nn.ModuleList(ExportBlock(layer, self.shape) for layer in llama.layers)
        self.norm = nn.Parameter(llama.norm.weight.detach().float(), requires_grad=False)

    def forward(self, emb, positions, mask, *past):
        # emb: [B, S, dim]; positions: [B, S] int64; mask: [B, 1, S, P+S] bool (True = attend);
        # past: past_k.0, past_v.0, past_k.1, ... each [B, H, P, D] -> hidden [B, dim], present k/v [B, H, P+S, D]
        freqs = positions.unsqueeze(-1).float() * self.inv_freq
        angles = torch.cat([freqs, freqs], dim=-1).unsqueeze(1)
        cos, sin = angles.cos() * self.rope_scaling, angles.sin() * self.rope_scaling
        # a large negative, not -inf: a fully masked row (never produced here) would give NaN
        bias = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
        x, present = emb, []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, bias, past[2 * i], past[2 * i + 1])
            present += [k, v]
        return (rms_norm(x[:, -1], self.norm, self.shape.eps), *present)

    def example_inputs(self, batch: int = 2, seq: int = 3, past: int = 4) -> tuple:
        s = self.shape
        mask = torch.ones(batch, 1, seq, past + seq, dtype=torch.bool)
        kv = [torch.zeros(batch, s.n_heads, past, s.head_dim) for _ in range(2 * s.n_layers)]
        return (torch.zeros(batch, seq, s.dim), torch.arange(seq).expand(batch, seq).contiguous(), mask, *kv)
