"""ChatTTS's GPT as one ONNX graph of ONNX Runtime's fused transformer ops, built from the loaded weights.

Inputs: embeddings [B, S, dim], positions [B, S], mask [B, 1, S, P+S] (True = attend) and each layer's KV cache
[B, H, M, D] (M: the most positions a call will hold); outputs: the last position's hidden state [B, dim] and
the KV caches again. The graph computes in fp32 or fp16 (weights, activations and KV caches in that dtype);
embeddings in and the hidden state out are fp32 either way, cast inside the graph. The caches are shared
buffers: each step writes its S new keys/values at slots P..P+S-1 in place (the caller binds the same memory
as input and output), so no step copies the cache. One graph serves prefill (S prompt positions, P = 0) and
decode (S = 1); P comes from the mask's width.

The graph is written node by node rather than traced with `torch.onnx.export`: a traced Llama becomes about
60 small ONNX nodes per layer (rotary as slices, concats and multiplies, attention as transposes, matmuls and a
softmax), which ONNX Runtime runs one by one and which cost about as much as the int4 matrix multiplies in a
decode step. Here each layer is ONNX Runtime's own `SimplifiedLayerNormalization` (RMSNorm), `RotaryEmbedding`
(rotate-half, from the positions) and `GroupQueryAttention` (the in-place KV cache, additive mask, softmax in
one kernel), around four plain `MatMul`s with q/k/v and gate/up fused, which the int8 and int4 quantizers
replace.
The maths is transformers' `LlamaModel`'s; tests compare the two.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from chattts_lab.engines.lab.model import Shape

OPSET = 18


def input_names(n_layers: int) -> list[str]:
    return ["emb", "positions", "mask"] + [f"past_{kv}.{i}" for i in range(n_layers) for kv in "kv"]


def output_names(n_layers: int) -> list[str]:
    return ["hidden"] + [f"present_{kv}.{i}" for i in range(n_layers) for kv in "kv"]


# the precisions a graph is written in, and the numpy dtype of its float weights, activations and KV caches
COMPUTE_DTYPES = {"fp32": np.float32, "fp16": np.float16}


class _Graph:
    """Collects initializers and nodes; each helper returns its output names. Float weights are stored in
    `dtype`, the dtype the graph computes in; integer constants keep their own."""

    def __init__(self, dtype=np.float32):
        self.initializers, self.nodes, self.dtype = [], [], dtype

    def weight(self, name: str, value) -> str:
        from onnx import numpy_helper

        array = value.detach().float().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.dtype.kind == "f":
            array = array.astype(self.dtype)
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def matmul_weight(self, name: str, *linears) -> str:
        """torch Linear weights [out, in] (fused along out) -> one MatMul right operand [in, sum(out)]."""
        return self.weight(name, torch.cat([w.detach().float() for w in linears]).T)

    def op(self, op: str, inputs: list[str], outputs: list[str], ms: bool = False, **attrs):
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, outputs, name=f"{outputs[0]}/{op}",
                                           domain="com.microsoft" if ms else "", **attrs))
        return outputs[0] if len(outputs) == 1 else outputs


def build_graph(llama, compute: str = "fp32"):
    """An onnx.ModelProto of `llama` (a transformers LlamaModel, ChatTTS's GPT) as described above, computing in
    `compute` (a key of COMPUTE_DTYPES)."""
    from onnx import TensorProto, helper

    dtype = COMPUTE_DTYPES[compute]
    s = Shape.of(llama.config)
    g = _Graph(dtype)
    rotary = llama.rotary_emb
    angles = torch.arange(llama.config.max_position_embeddings).float()[:, None] * rotary.inv_freq.detach().float()
    scaling = float(rotary.attention_scaling)
    cos, sin = g.weight("cos", angles.cos() * scaling), g.weight("sin", angles.sin() * scaling)
    # a large negative, not -inf: a fully masked row (never produced here) would give NaN
    attend, block = g.weight("attend", np.array(0.0)), g.weight("block", np.array(np.finfo(dtype).min))
    bias = g.op("Where", ["mask", attend, block], ["attention_bias"])
    lengths = _cache_lengths(g)
    fp32 = dtype == np.float32
    compute_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = "emb" if fp32 else g.op("Cast", ["emb"], ["emb_cast"], to=compute_type)
    with torch.no_grad():
        for i, layer in enumerate(llama.layers):
            x = _layer(g, f"layer{i}", layer, s, x, bias, lengths, cos, sin, i)
        last = g.op("Gather", [x, g.weight("last", np.array(-1, np.int64))], ["last_position"], axis=1)
        normed = g.op("SimplifiedLayerNormalization", [last, g.weight("norm", llama.norm.weight)],
                      ["hidden" if fp32 else "hidden_cast"], axis=-1, epsilon=s.eps)
        if not fp32:
            g.op("Cast", [normed], ["hidden"], to=TensorProto.FLOAT)
    f, dims = TensorProto.FLOAT, ["batch", s.n_heads, None, s.head_dim]
    inputs = [helper.make_tensor_value_info("emb", f, ["batch", "seq", s.dim]),
              helper.make_tensor_value_info("positions", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("mask", TensorProto.BOOL, ["batch", 1, "seq", "total"])]
    inputs += [helper.make_tensor_value_info(n, compute_type, dims[:2] + ["slots"] + dims[3:])
               for n in input_names(s.n_layers)[3:]]
    outputs = [helper.make_tensor_value_info("hidden", f, ["batch", s.dim])]
    outputs += [helper.make_tensor_value_info(n, compute_type, dims[:2] + ["slots"] + dims[3:])
                for n in output_names(s.n_layers)[1:]]
    graph = helper.make_graph(g.nodes, "chattts_gpt", inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9  # what onnxruntime 1.2x/1.3x reads
    return model


def _cache_lengths(g: _Graph) -> tuple[str, str]:
    """GroupQueryAttention's (seqlens_k [B] = P+S-1 per item, total_sequence_length = P+S), from the mask's shape:
    every item's new positions go to the same cache slots (padding is masked, not skipped)."""
    from onnx import TensorProto

    shape = g.op("Shape", ["mask"], ["mask_shape"])
    total = g.op("Cast", [g.op("Gather", [shape, g.weight("width_axis", np.array(3, np.int64))], ["total64"])],
                 ["total_sequence_length"], to=TensorProto.INT32)
    batch = g.op("Slice", [shape, g.weight("batch_from", np.array([0], np.int64)), g.weight("batch_to", np.array([1], np.int64))],
                 ["batch_size"])
    last = g.op("Sub", [total, g.weight("one", np.array(1, np.int32))], ["last_slot"])
    return g.op("Expand", [last, batch], ["seqlens_k"]), total


def _layer(g: _Graph, name: str, layer, s: Shape, x: str, bias: str, lengths: tuple[str, str], cos: str, sin: str,
           i: int) -> str:
    attn, mlp = layer.self_attn, layer.mlp
    h = g.op("SimplifiedLayerNormalization", [x, g.weight(f"{name}.norm1", layer.input_layernorm.weight)],
             [f"{name}.normed1"], axis=-1, epsilon=s.eps)
    qkv = g.op("MatMul", [h, g.matmul_weight(f"{name}.qkv.weight", attn.q_proj.weight, attn.k_proj.weight,
                                             attn.v_proj.weight)], [f"{name}.qkv"])
    q, k, v = g.op("Split", [qkv], [f"{name}.q", f"{name}.k", f"{name}.v"], axis=-1, num_outputs=3)
    q = g.op("RotaryEmbedding", [q, "positions", cos, sin], [f"{name}.q_rot"], ms=True, num_heads=s.n_heads)
    k = g.op("RotaryEmbedding", [k, "positions", cos, sin], [f"{name}.k_rot"], ms=True, num_heads=s.n_heads)
    # inputs: q, k, v, past k/v (= present: one buffer), seqlens_k, total length, no cos/sin/position ids (the
    # rotary above handles left-padded prompts' positions; GQA's own reads only the first position of a prompt)
    y = g.op("GroupQueryAttention", [q, k, v, f"past_k.{i}", f"past_v.{i}", *lengths, "", "", "", bias],
             [f"{name}.attention", f"present_k.{i}", f"present_v.{i}"], ms=True, num_heads=s.n_heads,
             kv_num_heads=s.n_heads, scale=1.0 / math.sqrt(s.head_dim))[0]
    o = g.op("MatMul", [y, g.matmul_weight(f"{name}.o.weight", attn.o_proj.weight)], [f"{name}.o"])
    x = g.op("Add", [x, o], [f"{name}.residual1"])
    h = g.op("SimplifiedLayerNormalization", [x, g.weight(f"{name}.norm2", layer.post_attention_layernorm.weight)],
             [f"{name}.normed2"], axis=-1, epsilon=s.eps)
    gate_up = g.op("MatMul", [h, g.matmul_weight(f"{name}.gate_up.weight", mlp.gate_proj.weight, mlp.up_proj.weight)],
                   [f"{name}.gate_up"])
    gate, up = g.op("Split", [gate_up], [f"{name}.gate", f"{name}.up"], axis=-1, num_outputs=2)
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], [f"{name}.sigmoid"])], [f"{name}.silu"])
    down = g.op("MatMul", [g.op("Mul", [silu, up], [f"{name}.act"]), g.matmul_weight(f"{name}.down.weight", mlp.down_proj.weight)],
                [f"{name}.down"])
    return g.op("Add", [x, down], [f"{name}.residual2"])
