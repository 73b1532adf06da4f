"""Continuous batching in the lab decode loop: rows join a running generation at the next step and leave at once.
Both engines that run the lab's loop use it (lab, and onnx with its ONNX Runtime session as the forward pass): it
asks of the model only engines/lab/engine.py's `DecodeModel` contract, whose KV cache is torch tensors that the rows
below move and copy, and of the runtime only its `generating()` context around the steps.

`lab_generate` runs one batch from prefill to its last row's end. Here a fixed set of KV-cache rows is owned by a
`RowDecoder`, and each row is one text with its own prompt, position, sampler (temperature, top-P/top-K, seed,
token limits: ChatTTS's own processors for that request) and voice (the speaker embedding is in its prompt):

- `admit(prompt)` prefills the prompt alone into a free cache row (the same prefill `lab_generate` runs at batch 1)
  and samples the row's first token; the row takes part from the next `step()` on.
- `begin(prompt)` takes a free cache row without computing anything, and `fill(row, positions)` prefills the next
  slice of its prompt there (chunked prefill: a server runs one slice between two steps, so the running rows wait
  for a slice, not for a whole prompt). A row being filled is not active: no step reads or writes its cache row.
  With its last slice it samples its first token and joins the active rows. `admit` is `begin` and one `fill`.
- `step()` runs one GPT forward for every active row and samples each row's next token with its own sampler.
- `release(row)` frees the row at once: the last active row moves into its place, so the active rows are always
  the first n of the cache and a step reads only theirs.

Every row keeps its own slots as `lab_generate` keeps them (prompt at 0..L-1, token i at L+i, position = slot).
A slice of the prompt at slots p..p+S-1 attends to the row's slots 0..p+S-1 with the causal mask shifted by p
(`slice_mask`: the model's own causal prefill lines the mask up at slot 0, which is right only for p = 0); the
row being filled sits in the cache row just after the active ones, so that it joins them where it is.
The fused attention kernel (and ONNX Runtime's GroupQueryAttention, whose cache length is one for the batch, read
from the mask's width) writes a step's keys and values at one slot for the whole batch, so a step writes at
the longest row's next slot `s` and attends to each row's own slots plus `s`; afterwards the rows behind copy
slot `s` to their own next slot. Rows behind see slots between their end and `s` masked: those hold finite
values (zeroed when the row is admitted, then written by every step), which the kernel's masked sums need.

What is and is not the same as a request run alone: a whole prefill is identical; one in slices computes each
position from the same keys and values in smaller matrix products (fp32: within float rounding, 1.5e-7 relative on
the tiny weights; the lab's int8/int4 quantize activations per position, so the same; ONNX Runtime's int8 graph
quantizes a call's activations with one scale for all its positions, so a slice's rounding differs: about 1e-2); the sampler is the same code on
the same [num_vq, vocab] logits with the same seeded generator use. The decode step's floating-point sums are
not bit-identical: the attention kernel's vectorised reductions depend on where masked slots fall, and a
projection's kernel may tile a batch of rows differently from one row (int8 activations are quantized per row
in the lab's own kernels, but torch's fp32/bf16 GEMMs choose tiles by batch size; ONNX Runtime's int8 graph
quantizes a step's activations with one scale for the whole batch, so there a row's rounding depends on the others).
Sampled tokens agree unless a random draw falls within that rounding of a boundary between two tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from chattts_lab.engines.lab.sampler import Sampler, sample_rows
from chattts_lab.engines.lab.chunk_decode import ChunkState, decode_chunks
from chattts_lab.engines.lab.stream import HOLD, LEFT_CONTEXT, prepare_text
from chattts_lab.metrics import samples_for_tokens

log = logging.getLogger(__name__)
SLOT_STEP = 256  # the cache grows in whole blocks of slots when a longer row arrives


@dataclass
class RowPrompt:
    """What ChatTTS's `_infer_code` hands its generator for one text: the prompt embedded (speaker included)
    and that request's sampling settings."""

    emb: torch.Tensor  # [1, L, dim]
    temperature: torch.Tensor  # [num_vq]
    eos: int
    max_new_token: int
    min_new_token: int
    processors: tuple
    manual_seed: int | None
    ensure_non_empty: bool = True

    @property
    def length(self) -> int:
        return int(self.emb.shape[1])


def capture_prompt(chat, text: str, params_code) -> RowPrompt:
    """Build one text's prompt with ChatTTS's own `_infer_code` (speaker, sample-audio prompt, processors), its
    generator answering with the prompt instead of generating. The caller holds the model."""
    gpt = chat.gpt
    saved = gpt.__dict__.get("generate")

    def answer(emb, inputs_ids, temperature, eos_token, attention_mask=None, max_new_token=2048, min_new_token=0,
               logits_processors=(), manual_seed=None, ensure_non_empty=True, **_):
        return RowPrompt(emb.detach().clone(), temperature.detach().float().flatten(), int(eos_token),
                         int(max_new_token), int(min_new_token), tuple(logits_processors), manual_seed,
                         bool(ensure_non_empty))

    gpt.__dict__["generate"] = answer
    try:
        return chat._infer_code([text], False, chat.device, True, params_code)
    finally:
        if saved is None:
            gpt.__dict__.pop("generate", None)
        else:
            gpt.__dict__["generate"] = saved


@dataclass(eq=False)
class Row:
    """One text being generated: its tokens and hidden states so far, in preallocated buffers."""

    prompt: RowPrompt
    sampler: Sampler
    tokens: torch.Tensor  # [max_new, num_vq]
    hiddens: torch.Tensor  # [max_new, dim]
    history: torch.Tensor  # [num_vq, max_new], the sampler's token history
    length: int  # cache slots it holds: prompt (so far, while being filled) + tokens fed back (= its next position)
    steps: int = 0  # tokens sampled (its EOS included)
    ended: str | None = None  # "eos" or "max_new_token" once it has ended
    next_ids: torch.Tensor | None = None  # [1, num_vq]: the last token, embedded with the other rows' at the next step
    prefill_s: float = 0.0
    chunk: ChunkState | None = None  # where its audio's next chunk continues the decoder's and vocoder's frames
    owner: object = None  # the caller's handle (the scheduler's job)
    meta: dict = field(default_factory=dict)

    @property
    def generated(self) -> int:
        """Audio tokens kept: an EOS step is not one."""
        return self.steps - (self.ended == "eos")

    @property
    def prefilled(self) -> int:
        """Prompt positions in its cache row so far (`fill`); the whole prompt once it is active."""
        return min(self.length, self.prompt.length)


def slice_mask(start: int, end: int, device) -> torch.Tensor | None:
    """The attention mask of prompt positions start..end-1 over cache slots 0..end-1 (True = attend): each position
    sees every slot up to its own. None from slot 0: the model's own causal prefill, as `lab_generate` runs it."""
    if start == 0:
        return None
    return torch.ones(end - start, end, dtype=torch.bool, device=device).tril(diagonal=start)[None, None]


def copy_behind(caches: list[torch.Tensor], rows: torch.Tensor, own: torch.Tensor, s: int, fused=None) -> None:
    """In every cache [B, H, T, Dh]: `cache[rows, :, own] = cache[rows, :, s]`, with the lab's kernels (`fused`) in
    one call where they are loaded. That indexing took 1.3 ms a step at 6 rows over a step's 40 caches; without the
    kernels the rows of [B * H * T, Dh] are moved with one index_select and one index_copy_ a cache (a fifth of the
    indexing's time, off the torch thread)."""
    if fused is not None:
        return fused.copy_behind(caches, rows, own, s)
    n, heads, slots, _ = caches[0].shape
    first = (rows[:, None] * heads + torch.arange(heads, device=rows.device)) * slots  # [rows, heads]
    source, target = (first + s).flatten(), (first + own[:, None]).flatten()
    for cache in caches:
        flat = cache.view(n * heads * slots, -1)
        flat.index_copy_(0, target, flat.index_select(0, source))


class RowDecoder:
    """Up to `rows` texts generated together, each joining and leaving on its own. One thread drives it.
    (The interface a scheduler drives: chattts_lab.engines.base.RowDecoder.)"""

    hold = HOLD  # a chunk's last tokens wait for their right context (engines/lab/stream.py)
    left_context = LEFT_CONTEXT  # tokens decoded before a chunk that continues no row's frames (chunk_decode.py)

    def __init__(self, engine, chat, rows: int, slots: int = SLOT_STEP):
        self.engine, self.chat, self.rows = engine, chat, rows
        self.model, self.heads = engine.gpt_module, engine.heads
        self.active: list[Row] = []
        self.filling: Row | None = None  # begun, its prompt not yet all in: the cache row after the active ones
        self.slots = 0
        self._caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._rot = None
        self._view: tuple[int, int, list] | None = None  # (first, last, the view the model was last pointed at)
        self._grow(slots)

    @property
    def free(self) -> int:
        return self.rows - len(self.active) - (self.filling is not None)

    def _grow(self, slots: int) -> None:
        """(Re)allocate the cache for `slots` positions per row, keeping what the active rows hold."""
        slots = -(-slots // SLOT_STEP) * SLOT_STEP
        if slots <= self.slots:
            return
        old, used = self._caches, max(self._window(), self.filling.length if self.filling else 0)
        held = len(self.active) + (self.filling is not None)
        self.model.reset_cache(self.rows, slots)  # empty: pages become resident only where written
        new = self.model.caches
        for (k, v), (k0, v0) in zip(new, old):
            k[:held, :, :used] = k0[:held, :, :used]
            v[:held, :, :used] = v0[:held, :, :used]
        self._caches, self._rot, self.slots, self._view = new, self.model.rot_table, slots, None

    def _window(self) -> int:
        return max((r.length for r in self.active), default=0) + 1

    def _bind(self, first: int, last: int) -> None:
        """Point the model at cache rows first..last-1 (a contiguous view) and at this decoder's rotary table:
        other callers of the model (a refine pass, `lab_generate`) reset both. The same view is kept while the rows
        stay the same (the onnx engine binds a view's memory once, when it first sees it)."""
        if self._view is None or self._view[:2] != (first, last) or self.model.caches is not self._view[2]:
            self._view = (first, last, [(k[first:last], v[first:last]) for k, v in self._caches])
        self.model.caches = self._view[2]
        self.model.rot_table = self._rot

    def admit(self, prompt: RowPrompt, owner=None) -> Row:
        """Prefill `prompt` into the next free row and sample its first token; it steps from the next step on."""
        row = self.begin(prompt, owner)
        self.fill(row)
        return row

    @torch.inference_mode()
    def begin(self, prompt: RowPrompt, owner=None) -> Row:
        """Take the next free cache row for `prompt`; `fill` prefills it. One row is filled at a time (it sits just
        after the active rows, where it joins them)."""
        if not self.free:
            raise RuntimeError("no free row: release one first")
        if self.filling is not None:
            raise RuntimeError("a row is being filled: fill it to its end (or release it) first")
        self._grow(prompt.length + prompt.max_new_token + 1)
        row = self._new_row(prompt, owner)
        row.length = 0
        self.filling = row
        return row

    @torch.inference_mode()
    def fill(self, row: Row, positions: int | None = None) -> bool:
        """Prefill the next `positions` of the row's prompt (None: all that remain) into its cache row. With its
        last position the row samples its first token and is active from the next step on: True then."""
        if row is not self.filling:
            raise RuntimeError("fill the row that `begin` gave, until it is active")
        t0 = time.perf_counter()
        start, L, index, device = row.length, row.prompt.length, len(self.active), self.engine.device
        end = L if positions is None else min(L, start + positions)
        with self.engine.generating():
            self._bind(index, index + 1)
            hidden = self.model(row.prompt.emb[:, start:end].to(device), torch.arange(start, end, device=device)[None],
                                start, slice_mask(start, end, device))
            row.length = end
            if end == L:
                self._keep_masked_slots_finite(index, L)
                self.filling = None
                self.active.append(row)
                self._take(row, hidden[0], self.heads.code_logits(hidden), first=True)
        row.prefill_s += time.perf_counter() - t0
        return end == L

    def _keep_masked_slots_finite(self, index: int, L: int) -> None:
        """Every active row's slots below the longest row's length s hold finite values: its own, or zeros, or what a
        step wrote there (slot s itself is written by the next step, for every row). A new row of prompt length L
        zeroes its slots L..s. A prompt longer than every row moves s to L: the others zero their slots s..L, slot s
        included, which no step has written yet and which is masked for them once s moves (a cache comes from
        torch.empty, and a masked slot's weight 0 times a NaN left there in memory is NaN)."""
        window = self._window()  # s + 1
        for k, v in self._caches:
            for cache in (k, v):
                cache[index, :, L:window].zero_()
                cache[:index, :, window - 1 : L + 1].zero_()

    def _new_row(self, prompt: RowPrompt, owner) -> Row:
        device, num_vq, n = self.engine.device, self.heads.num_vq, prompt.max_new_token
        history = torch.zeros(num_vq, n, dtype=torch.long, device=device)
        temperature = prompt.temperature.to(device).view(-1, 1)
        sampler = Sampler(prompt.processors, temperature, num_vq, self.heads.vocab, prompt.eos, prompt.min_new_token,
                          prompt.manual_seed, self.chat.gpt.generator, history, fused=self.engine.cpu_kernels)
        return Row(prompt, sampler, torch.zeros(n, num_vq, dtype=torch.long, device=device),
                   torch.empty(n, self.model.shape.dim, device=device), history, prompt.length, owner=owner)

    def _take(self, row: Row, hidden: torch.Tensor, logits: torch.Tensor, first: bool = False,
              idx: torch.Tensor | None = None) -> None:
        """Sample the row's next token from its logits [num_vq, vocab], as `lab_generate` does for one item (`idx`:
        already sampled, with the other rows)."""
        i = row.steps
        idx = row.sampler.sample(logits, i) if idx is None else idx
        # stock regenerates an unseeded item whose very first token ends it; a fresh draw is the same thing here
        for _ in range(8):
            if not (first and row.prompt.ensure_non_empty and row.prompt.manual_seed is None
                    and bool(idx.eq(row.prompt.eos).any())):
                break
            idx = row.sampler.sample(logits, i)
        row.hiddens[i] = hidden
        row.tokens[i] = idx.view(-1)
        row.history[:, i : i + 1] = idx
        row.sampler.append(idx, i)
        row.steps = i + 1
        if bool(idx.eq(row.prompt.eos).any()):
            row.ended = "eos"
        elif row.steps >= row.prompt.max_new_token:
            row.ended = "max_new_token"
        else:
            row.next_ids = idx.view(1, -1)

    @torch.inference_mode()
    def step(self) -> list[Row]:
        """One GPT step for every active row that has not ended; returns the rows that ended at it."""
        rows = [r for r in self.active if r.ended is None]
        if not rows:
            return []
        if rows != self.active[: len(rows)]:
            raise RuntimeError("release ended rows before the next step")
        with self.engine.generating():
            return self._step(rows)

    def _step(self, rows: list[Row]) -> list[Row]:
        n, device = len(rows), self.engine.device
        lengths = torch.tensor([r.length for r in rows], device=device)
        s = int(lengths.max())
        slots = torch.arange(s + 1, device=device)
        valid = (slots[None] < lengths[:, None]) | (slots[None] == s)
        self._bind(0, n)
        x = self.heads.embed_code(torch.cat([r.next_ids for r in rows]))  # one call for every row: [n, 1, dim]
        hidden = self.model(x, lengths.view(n, 1), s, valid.view(n, 1, 1, s + 1))
        self._copy_behind(rows, lengths, s)
        logits = self.heads.code_logits(hidden).view(n, -1, self.heads.vocab)
        drawn = sample_rows([r.sampler for r in rows], logits, [r.steps for r in rows]) or [None] * n
        ended = []
        for j, row in enumerate(rows):
            row.length += 1
            self._take(row, hidden[j], logits[j], idx=drawn[j])
            if row.ended:
                ended.append(row)
        return ended

    def _copy_behind(self, rows: list[Row], lengths: torch.Tensor, s: int) -> None:
        """Rows shorter than the longest had this step's keys/values written at slot s: move them to their own."""
        behind = (lengths < s).nonzero().flatten()
        if len(behind):
            copy_behind([c for kv in self._caches for c in kv], behind, lengths[behind], s, self.engine.cpu_kernels)

    @torch.inference_mode()
    def release(self, row: Row) -> None:
        """Free the row's cache row now; the last active row takes its place, and a row being filled moves down
        behind it (it joins the active rows where it is)."""
        if row is self.filling:
            self.filling = None
            return
        index = self.active.index(row)
        last = len(self.active) - 1
        if index != last:
            self._move(last, index, self.active[last].length + 1)
            self.active[index] = self.active[last]
        self.active.pop()
        if self.filling is not None:
            self._move(last + 1, last, self.filling.length)

    def _move(self, source: int, target: int, used: int) -> None:
        """Copy cache row `source`'s first `used` slots to cache row `target`."""
        for k, v in self._caches:
            k[target, :, :used] = k[source, :, :used]
            v[target, :, :used] = v[source, :, :used]

    def reset(self) -> None:
        """Drop every row (after a failure inside a step, whose state is then unknown)."""
        self.active.clear()
        self.filling = None

    def prompt(self, text: str, params_refine, params_code, refine: bool, normalize: bool) -> RowPrompt:
        """One text's prompt as ChatTTS's `infer` builds it: normalized, refined when asked, then captured with
        its speaker and sampling settings. The caller holds the model."""
        text = prepare_text(self.chat, text, params_refine, not refine, normalize)
        return capture_prompt(self.chat, text, params_code)

    def decode_spans(self, spans: list[tuple[Row, int, int]]) -> list[np.ndarray]:
        """Samples [a, b) of each (row, a, b)'s audio, all rows in one decoder and vocoder call, each as if decoded
        alone. A span that starts where the row's last one ended continues its frames (chunk_decode.py); any other
        starts `left_context` tokens before a. A row's chunks join into its whole clip within stream.SEAM_BOUND."""
        decoded = decode_chunks(self.chat, [(row.hiddens, row.generated, a, b, row.chunk) for row, a, b in spans],
                                self.left_context, self.hold)
        for (row, _, _), (_, state) in zip(spans, decoded):
            row.chunk = state
        return [audio for audio, _ in decoded]

    def audio(self, row: Row) -> np.ndarray:
        """The row's whole clip, decoded at once."""
        n = row.generated
        if n == 0:
            return np.zeros(0, np.float32)
        wavs = np.asarray(self.chat._decode_to_wavs([row.hiddens[:n]], True))
        return wavs[0, : samples_for_tokens(n)].astype(np.float32)
