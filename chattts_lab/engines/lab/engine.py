"""The lab engine: a drop-in `GPT.generate` over the lean model, installed on one `Chat` instance.

ChatTTS's prompt building, speaker embedding, refine pass, decoder and vocoder stay its own; only the
token generator changes. The loop is gpt-fast's: prefill once, then one forward per step into a static
KV cache, tensor-only sampling, tokens written into preallocated buffers, per-item stopping by a
`finish` mask (the batch keeps its shape, so sampling consumes random numbers exactly as stock does).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext
from typing import ContextManager, NamedTuple, Protocol

import torch
import torch.nn as nn
from torch.nn.utils import parametrize

from chattts_lab.engines.base import EngineRuntime
from chattts_lab.engines.precisions import PRECISION
from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.linear import Int8Embedding, make_linear
from chattts_lab.engines.lab.model import Shape
from chattts_lab.engines.lab.sampler import Sampler

log = logging.getLogger(__name__)

class DecodeModel(Protocol):
    """What the decode loop (`lab_generate`) and its continuous-batching rows (continuous.py) step: the lab's own
    `LeanLlama`, or the onnx engine's `OnnxLlama` (an ONNX Runtime session) behind the same contract."""

    shape: Shape
    cache_dtype: torch.dtype
    # each layer's (k, v) KV cache, torch tensors [B, H, slots, D]: `reset_cache` makes them, a forward reads and
    # writes them, and a row decoder moves rows within them and points the model at a contiguous view of some rows
    # by setting this attribute (with `rot_table`, the positions' table that `reset_cache` made, or None)
    caches: list[tuple[torch.Tensor, torch.Tensor]]
    rot_table: torch.Tensor | None

    def reset_cache(self, batch: int, length: int) -> None: ...

    def free_cache(self) -> None: ...

    def __call__(self, emb: torch.Tensor, positions: torch.Tensor, start: int,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """emb [B, S, dim] at cache slots start..start+S-1, positions [B, S], mask None (causal) or a boolean
        [B, 1, S, start+S] (True = attend) -> the last position's hidden state [B, dim] fp32."""


class Heads(nn.Module):
    """ChatTTS's weight-normed heads, materialised once: 4 code heads as one [4*626, 768] projection.

    Under int8/int4 weights the code heads are int8 too: every step reads them, and at fp32 their 7.7 MB
    pushed the layers' weights out of cache between steps.
    """

    def __init__(self, embed, device: torch.device, precision: str):
        super().__init__()
        with torch.no_grad(), parametrize.cached():
            code = torch.cat([h.weight.detach().float() for h in embed.head_code])
        head_precision = "int8" if PRECISION[precision].quantized else "fp32"
        self.code = make_linear(code, head_precision, device, torch.float32)
        self.num_vq = len(embed.head_code)
        # one table for the 4 code embeddings: ids + offsets index it in one lookup
        codes = [e.weight.detach() for e in embed.emb_code]
        self.vocab = codes[0].shape[0]
        self.register_buffer("offsets", torch.arange(self.num_vq, device=device) * self.vocab)
        self.emb_code_table = torch.cat(codes).to(device)
        self.text_vocab = embed.emb_text.weight.shape[0]
        self.head_text, self.emb_text = embed.head_text, embed.emb_text  # int8 after quantize_text_tables

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [B, dim] -> [B * num_vq, vocab], rows ordered (item, codebook) as stock's
        return self.code(hidden).view(-1, self.num_vq, self.vocab).reshape(-1, self.vocab)

    def text_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        with parametrize.cached():
            return self.head_text(hidden).float()

    def embed_code(self, ids: torch.Tensor) -> torch.Tensor:
        # ids: [B, num_vq] -> [B, 1, dim]
        return torch.nn.functional.embedding(ids + self.offsets, self.emb_code_table).sum(1, keepdim=True)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb_text(ids[:, :1])


def quantize_text_tables(chat, device: torch.device) -> None:
    """int8 text embedding and text head (prompts and the refine pass: 130 MB of fp32 together) for ChatTTS.

    One table at a time, each fp32 original dropped before the next is made, so the load's peak RSS stays
    near what is kept. ChatTTS's GPT holds bound methods of both tables: those are replaced too.
    """
    embed, gpt = chat.embed, chat.gpt
    embed.emb_text = Int8Embedding(embed.emb_text.weight.detach().to(device))
    gpt.emb_text = embed.emb_text.__call__
    with torch.no_grad(), parametrize.cached():
        weight = embed.head_text.weight.detach().to(device)  # weight norm applied once
    embed.head_text = gpt.head_text = None  # the weight-normed originals go before the int8 copy is made
    embed.head_text = make_linear(weight, "int8", device, torch.float32)
    gpt.head_text = embed.head_text.__call__


def drop_stock_code_heads(chat) -> None:
    """ChatTTS's 4 weight-normed code heads (7.7 MB fp32) go: `Heads` holds them as one projection, and only
    stock's `GPT.generate`, which the lab replaces, calls them (through bound methods, dropped too)."""
    chat.embed.head_code = nn.ModuleList()
    chat.gpt.head_code = []


class LabRuntime(EngineRuntime):
    """The lab's decode loop installed on one ChatTTS: its GPT (the lean model, or for the onnx engine an ONNX
    Runtime session behind the same forward contract) and heads, and what a call hooks into."""

    name = "lab"
    streams_incrementally = True

    def __init__(self, gpt_module: DecodeModel, heads: Heads, device: torch.device, precision: str,
                 convert_s: float = 0.0):
        self.gpt_module, self.heads, self.device, self.precision = gpt_module, heads, device, precision
        self.convert_s = convert_s
        self.compiled = False
        self.notes: list[str] = []
        self.stream_first_chunk: int | None = None  # set by lab streaming: yield the first chunk this early
        self.recorder = None  # the call's StageRecorder while one runs (see reporting_steps_to)
        # the lab's kernels for the work around the model on CPU, for the onnx engine too: ChatTTS's logits chain in
        # one call (sampling.cpp) and a continuous batch's cache moves (continuous.copy_behind)
        self.cpu_kernels = kernels.load() if device.type == "cpu" else None

    @property
    def kernels(self) -> str:
        """Which kernels a decode step runs, e.g. 'lab-int8 avx512_vnni; fused-decode avx512; kv-cache int8'."""
        model = self.gpt_module
        glue = f"fused-decode {model.fused.simd()}" if model.fused is not None else "torch-ops"
        cache = str(model.cache_dtype).replace("torch.", "").replace("bfloat16", "bf16").replace("float", "fp")
        return f"{model.layers[0].qkv.kernel}; {glue}; {self.sampling}; kv-cache {cache}"

    @property
    def sampling(self) -> str:
        return "sampling fused" if self.cpu_kernels is not None else "sampling torch-ops"

    @property
    def gpt_dtype(self) -> str:
        from chattts_lab.engines.base import module_dtype

        return module_dtype(self.gpt_module)

    def weight_bytes_per_step(self) -> int:
        from chattts_lab.trackers.roofline import module_weight_bytes

        return self.gpt_weight_bytes() + module_weight_bytes(self.heads.code)

    def gpt_weight_bytes(self) -> int:
        from chattts_lab.trackers.roofline import module_weight_bytes

        return module_weight_bytes(self.gpt_module)

    @contextmanager
    def reporting_steps_to(self, recorder):
        self.recorder = recorder  # lab_generate and stream_infer report here
        try:
            yield
        finally:
            self.recorder = None

    def stream(self, chat, texts, params_refine, params_code, **kwargs):
        from chattts_lab.engines.lab.stream import stream_infer

        return stream_infer(chat, self, texts, params_refine, params_code, **kwargs)

    def generating(self) -> ContextManager[None]:
        """Held around the GPT's steps and the sampling between them (never around the decoder and vocoder): what
        this runtime needs while its GPT generates. Nothing for the lab's own loop; the onnx engine's runs torch on
        one thread meanwhile."""
        return nullcontext()

    def row_decoder(self, chat, max_rows: int):
        from chattts_lab.engines.lab.continuous import RowDecoder

        return RowDecoder(self, chat, max_rows)

    @contextmanager
    def first_chunk(self, steps: int):
        saved, self.stream_first_chunk = self.stream_first_chunk, steps
        try:
            yield
        finally:
            self.stream_first_chunk = saved


class _Prompt(NamedTuple):
    """Where the prompt's tokens sit, and what each position may attend to."""
    positions: torch.Tensor  # [B, L], as transformers numbers them
    mask: torch.Tensor | None  # the prefill's mask [B, 1, L, L]; None without padding
    lengths: torch.Tensor  # [B]: each prompt without its padding (the position of its first new token)
    valid: torch.Tensor | None  # [B, 1, 1, L + max_new_token]: the cache slots a decode step sees; None without padding


def _prompt(attention_mask: torch.Tensor | None, B: int, L: int, max_new_token: int, device) -> _Prompt:
    if attention_mask is None or bool(attention_mask.all()):
        return _Prompt(torch.arange(L, device=device).expand(B, L), None, torch.full((B,), L, device=device), None)
    am = attention_mask.to(device).bool()
    positions = am.long().cumsum(-1) - 1
    positions.masked_fill_(~am, 1)
    causal = torch.ones(L, L, dtype=torch.bool, device=device).tril()
    mask = causal[None] & am[:, None, :]
    mask |= torch.eye(L, dtype=torch.bool, device=device)[None]  # padded queries see themselves: no NaN rows
    valid = torch.ones(B, 1, 1, L + max_new_token, dtype=torch.bool, device=device)
    valid[:, 0, 0, :L] = am  # prompt padding stays masked in every decode step
    return _Prompt(positions, mask[:, None], am.long().sum(-1), valid)


class _Buffers(NamedTuple):
    """What the decode loop writes into, allocated once before its first step."""
    tokens: torch.Tensor  # [B, max_new_token, num_vq] (text: its one token in every codebook)
    history: torch.Tensor  # [rows, max_new_token]: the same tokens in the rows of stock's logits, for the sampler
    hiddens: torch.Tensor | None  # [B, max_new_token, dim] when the caller asks for hidden states
    finish: torch.Tensor  # [B]: the items that have sampled their end token
    end_idx: torch.Tensor  # [B]: each item's length


def _buffers(engine: LabRuntime, inputs_ids, max_new_token: int, infer_text: bool, return_hidden: bool) -> _Buffers:
    B, _, num_vq = inputs_ids.shape
    device = engine.device
    rows = B if infer_text else B * num_vq
    return _Buffers(
        tokens=torch.zeros(B, max_new_token, num_vq, dtype=inputs_ids.dtype, device=device),
        history=torch.zeros(rows, max_new_token, dtype=inputs_ids.dtype, device=device),
        hiddens=(torch.empty(B, max_new_token, engine.gpt_module.shape.dim, device=device) if return_hidden
                 else None),
        finish=torch.zeros(B, dtype=torch.bool, device=device),
        end_idx=torch.zeros(B, dtype=torch.long, device=device))


def _sampler(chat, engine: LabRuntime, out: _Buffers, *, temperature, eos_token, min_new_token, logits_processors,
             infer_text: bool, manual_seed) -> Sampler:
    B = out.tokens.shape[0]
    rows = out.history.shape[0]
    temperature = temperature.to(engine.device).float().unsqueeze(0).expand(B, -1).reshape(-1, 1)  # [rows, 1]
    return Sampler(processors=logits_processors, temperature=temperature, rows=rows,
                   vocab=engine.heads.text_vocab if infer_text else engine.heads.vocab, eos=eos_token,
                   min_new_token=min_new_token, manual_seed=manual_seed, generator=chat.gpt.generator,
                   history=out.history, fused=engine.cpu_kernels)


@torch.inference_mode()
def lab_generate(chat, engine: LabRuntime, emb, inputs_ids, temperature, eos_token, attention_mask=None,
                 max_new_token=2048, min_new_token=0, logits_processors=(), infer_text=False, return_attn=False,
                 return_hidden=False, stream=False, show_tqdm=True, ensure_non_empty=True, stream_batch=24,
                 manual_seed=None, context=None):
    """Same contract as ChatTTS's `GPT.generate` (yields `GPT.GenerationOutputs`)."""
    from ChatTTS.model.gpt import GPT

    context = context if context is not None else GPT.Context()
    model = engine.gpt_module
    B, L, _ = inputs_ids.shape
    while True:  # stock's ensure_non_empty: a batch in which an item ends at its first token starts again
        out = _buffers(engine, inputs_ids, max_new_token, infer_text=infer_text, return_hidden=return_hidden)
        sampler = _sampler(chat, engine, out, temperature=temperature, eos_token=eos_token,
                           min_new_token=min_new_token, logits_processors=logits_processors, infer_text=infer_text,
                           manual_seed=manual_seed)
        prompt = _prompt(attention_mask, B, L, max_new_token, engine.device)
        model.reset_cache(B, L + max_new_token)
        ended_at_once = yield from _decode(engine, emb.to(engine.device), prompt, out, sampler, GPT=GPT,
                                           eos_token=eos_token, infer_text=infer_text, stream=stream,
                                           stream_batch=stream_batch, context=context,
                                           regenerate_empty=ensure_non_empty and manual_seed is None)
        if ended_at_once is None:
            break
        log.warning("unexpected end at index %s; regenerate in order to ensure non-empty", ended_at_once)
    if not bool(out.finish.all()):
        if context.get():
            log.warning("generation is interrupted")
        else:
            log.warning("incomplete result. hit max_new_token: %d", max_new_token)
    model.free_cache()  # the KV cache lives for one call
    yield _outputs(GPT, out.tokens, out.hiddens, out.end_idx, infer_text)


def _decode(engine: LabRuntime, x, prompt: _Prompt, out: _Buffers, sampler: Sampler, *, GPT, eos_token,
            infer_text: bool, stream: bool, stream_batch: int, context, regenerate_empty: bool):
    """The steps: prefill, then one token per item per step until every item has ended, the buffers are full or
    the context says stop; yields the stream's chunks. Returns the items that ended at their first token when
    `regenerate_empty` wants those generated again, else None. What a step reads is unpacked into locals
    first, so that the steps cost no more Python than the loop written in one piece."""
    model, heads, recorder, first_chunk = engine.gpt_module, engine.heads, engine.recorder, engine.stream_first_chunk
    tokens, history, hiddens, finish, end_idx = out
    positions, mask, lengths, valid = prompt
    B, max_new_token, num_vq = tokens.shape
    L = positions.shape[1]
    logits_of = heads.text_logits if infer_text else heads.code_logits
    embed = heads.embed_text if infer_text else heads.embed_code
    start, pos, steps = 0, positions, 0
    for i in range(max_new_token):
        m = mask if i == 0 else (None if valid is None else valid[..., : start + 1])
        hidden = model(x, pos, start, m)  # [B, dim] fp32
        if recorder is not None:
            recorder.gpt_forward_done()
        if hiddens is not None:
            hiddens[:, i] = hidden
        idx = sampler.sample(logits_of(hidden), i)  # [rows, 1]
        step_tokens = idx.view(B, 1).expand(B, num_vq) if infer_text else idx.view(B, num_vq)
        tokens[:, i] = step_tokens
        history[:, i : i + 1] = idx
        sampler.append(idx, i)
        finish |= step_tokens.eq(eos_token).any(1)
        if i == 0 and regenerate_empty and bool(finish.any()):
            return finish.nonzero().flatten().tolist()
        not_finished = ~finish
        end_idx += not_finished
        steps += int(bool(not_finished.any())) if stream else 0
        if stream and steps > 0 and (steps % stream_batch == 0 or steps == first_chunk):
            yield _outputs(GPT, tokens, hiddens, end_idx, infer_text)
        if bool(finish.all()) or context.get():
            break
        # next step's input: the sampled tokens' embedding at the next cache slot
        start = L + i
        x = embed(step_tokens)
        pos = (lengths + i).view(B, 1)
    return None


def _outputs(GPT, tokens, hiddens, end_idx, infer_text):
    ends = end_idx.tolist()
    ids = [tokens[b, :n] for b, n in enumerate(ends)]
    if infer_text:
        ids = [t[:, 0] for t in ids]
    hid = [hiddens[b, :n] for b, n in enumerate(ends)] if hiddens is not None else []
    return GPT.GenerationOutputs(ids=ids, attentions=[], hiddens=hid)
