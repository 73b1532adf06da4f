"""ChatTTS's logits processing and sampling, as tensor ops on a fixed batch.

Stock ChatTTS rebuilds a one-hot count of the last 16 tokens, and runs transformers' warpers, at every
step. Here the repetition counts are kept incrementally (one scatter in, one out), top-P and top-K
rank only the top-K candidates instead of sorting the whole vocabulary, and the rest are the same tensor
expressions without their Python layers, so the tokens stay identical to stock's: temperature,
repetition penalty, top-P, top-K (in ChatTTS's order), the min-new-token EOS mask, softmax over the
whole vocabulary, then `torch.multinomial` with the same generator use (re-seeded every step when seeded).
Processors it does not recognise are called as stock calls them, with the token history.

On CPU, a seeded draw keeps its noise: torch.multinomial draws one sample as a race, argmax(p / q) with q ~ Exp(1)
drawn from the generator, and stock re-seeds the generator before every step's draw, so every step of a seeded
request races against the same q. Drawing it was most of the sampling's time (19 ns a value: 0.38 ms a step at 8
rows, about 4 % of the step); it is drawn once per request and shape, and each step divides and takes the argmax
(`Race`). Whether this torch draws that way is checked once per process (`multinomial_is_a_race`); if not, every draw
is torch.multinomial. An unseeded draw has no tokens of stock's to equal: it inverts each row's running sum at one
uniform number (`draw_unseeded`), the same distribution for one random number a row instead of one per vocabulary
entry. On CUDA (not checked here) every draw is torch.multinomial, as before.

On CPU, ChatTTS's usual chain (penalty, then top-P and top-K) runs as one call of the lab's kernels
(`sampling.cpp`), with the same values: the penalty's factors come from a table that torch.pow filled at the
very positions the torch path computes them at.
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)


def _stock_processors() -> tuple[type, type, type]:
    """ChatTTS's repetition penalty and transformers' top-P and top-K warpers, imported when a sampler is built:
    importing ChatTTS costs a fresh process about 4 s of CPU (transformers, numba, torch._dynamo), which every
    process that imports the engine registry without loading a model (`python -m bench list`, Ray Serve's
    `--stop`, the app's flags) would pay through `chattts_lab.engines.lab`."""
    from ChatTTS.model.processors import CustomRepetitionPenaltyLogitsProcessorRepeat
    from transformers.generation import TopKLogitsWarper, TopPLogitsWarper

    return CustomRepetitionPenaltyLogitsProcessorRepeat, TopPLogitsWarper, TopKLogitsWarper


class Sampler:
    def __init__(self, processors, temperature: torch.Tensor, rows: int, vocab: int, eos: int,
                 min_new_token: int, manual_seed, generator: torch.Generator, history: torch.Tensor, fused=None):
        """history: [rows, max_new] buffer the caller fills with each step's tokens (for unknown processors).
        fused: the lab's kernels (kernels.load()) to run ChatTTS's usual chain in one call, or None (torch ops)."""
        self.temperature = temperature  # [rows, 1]
        self.eos, self.min_new_token = eos, min_new_token
        self.manual_seed, self.generator = manual_seed, generator
        self.own_draws = temperature.device.type == "cpu"  # the draws below are tested on CPU; CUDA: torch.multinomial
        self.race = Race(generator, manual_seed) if manual_seed is not None and self.own_draws and \
            multinomial_is_a_race() else None
        self.history = history
        self.steps = []
        self.window = 0
        self.chain: dict | None = {}  # ChatTTS's usual chain's settings, for sampling rows together (sample_rows)
        Penalty, TopP, TopK = _stock_processors()
        processors, kinds = list(processors), []
        while processors:
            p = processors.pop(0)
            if isinstance(p, Penalty):
                self.window = p.past_window
                self.freq = torch.zeros(rows, vocab, dtype=torch.long, device=temperature.device)
                self.ones = torch.ones(rows, 1, dtype=torch.long, device=temperature.device)
                self.steps.append(self._penalty(p.penalty))
                self.chain["penalty"] = p.penalty
                kinds.append("penalty")
            elif _top_p_then_top_k(p, processors[0] if processors else None):
                top_k = processors.pop(0)
                self.steps.append(self._top_p_top_k(p.top_p, p.min_tokens_to_keep, top_k.top_k))
                self.chain.update(top_p=p.top_p, keep=p.min_tokens_to_keep, top_k=top_k.top_k)
                kinds.append("top_p_top_k")
            elif isinstance(p, TopP):
                self.steps.append(self._top_p(p.top_p, p.min_tokens_to_keep, p.filter_value))
                kinds.append("top_p")
            elif isinstance(p, TopK):
                self.steps.append(self._top_k(p.top_k, p.filter_value))
                kinds.append("top_k")
            else:
                self.steps.append(self._generic(p))
                kinds.append("other")
        if kinds not in (["penalty", "top_p_top_k"], ["top_p_top_k"]):
            self.chain = None
        self.fused = fused if self.chain is not None and temperature.device.type == "cpu" else None
        if self.fused is not None:
            self._fused_arguments(rows)

    def _fused_arguments(self, rows: int) -> None:
        """What `sampling_filter` takes besides the logits, made once: the penalty's counts and its factor for every
        count the window allows (torch.pow at the positions `_penalty` computes it at, so the factors are its own),
        1 - top_p in float32 as `_top_p_top_k` compares it, and top-K, one a row."""
        c = self.chain
        factors = lambda: torch.stack([torch.pow(c["penalty"], torch.full_like(self.freq, n))  # noqa: E731
                                       for n in range(self.window + 1)])
        self.penalty_tables = ([self.freq], [factors()]) if self.window else ([], [])
        self.limit = torch.full((rows,), 1 - c["top_p"], dtype=torch.float32)
        self.top_k = torch.full((rows,), c["top_k"], dtype=torch.long)
        self.early_rows = {early: torch.full((rows,), early) for early in (False, True)}

    def _penalty(self, penalty: float):
        def apply(logits, i):
            alpha = torch.pow(penalty, self.freq)
            return torch.where(logits < 0, logits * alpha, logits / alpha)

        return apply

    @staticmethod
    def _top_p(top_p: float, keep: int, fill: float):
        def apply(logits, i):
            sorted_logits, order = torch.sort(logits, descending=False)
            remove = sorted_logits.softmax(-1).cumsum(-1) <= (1 - top_p)
            remove[..., -keep:] = 0
            return logits.masked_fill(remove.scatter(1, order, remove), fill)

        return apply

    @staticmethod
    def _top_p_top_k(top_p: float, keep: int, top_k: int):
        """Top-P then top-K (ChatTTS's order, both filling with -inf), sorting only the top-K candidates.

        Whatever top-P keeps beyond the K largest logits, top-K removes, so only those K need ranking:
        top-P keeps the largest logits down to the first whose probability mass *at or below* it (what
        stock's ascending cumsum holds there: 1 - the mass ranked above it) is <= 1 - top_p, and always
        the `keep` largest; the survivors are a run of the largest, ended by a threshold. The mass is
        summed in float64 and compared in float32, as stock's cumsum (float64 accumulation, float32
        result) is, so the kept set equals stock's unless a cumulative mass lies within float32 rounding
        of 1 - top_p, or logits tie exactly at the cut (stock then keeps whichever its sort put last).
        """
        limit = torch.tensor(1 - top_p, dtype=torch.float32)

        def apply(logits, i):
            k = min(top_k, logits.size(-1))
            top = torch.topk(logits, k).values  # [rows, k], largest first
            p = (top.double() - torch.logsumexp(logits.double(), -1, keepdim=True)).exp()
            at_or_below = 1 - (p.cumsum(-1) - p)
            kept = at_or_below.float() > limit
            kept[:, :keep] = True
            threshold = top.gather(1, kept.sum(-1, keepdim=True) - 1)  # the smallest survivor
            return logits.masked_fill(logits < threshold, -torch.inf)

        return apply

    @staticmethod
    def _top_k(top_k: int, fill: float):
        def apply(logits, i):
            k = min(top_k, logits.size(-1))
            return logits.masked_fill(logits < torch.topk(logits, k)[0][..., -1, None], fill)

        return apply

    def _generic(self, processor):
        def apply(logits, i):
            return processor(self.history[:, :i], logits)

        return apply

    def sample(self, logits: torch.Tensor, i: int) -> torch.Tensor:
        """logits: [rows, vocab] fp32 for step i -> token ids [rows, 1]."""
        logits = logits / self.temperature
        if self.fused is not None:
            logits = self.fused.sampling_filter(logits, *self.penalty_tables, self.limit, self.top_k,
                                                self.chain["keep"], self.eos, self.early_rows[i < self.min_new_token])
        else:
            for step in self.steps:
                logits = step(logits, i)
            if i < self.min_new_token:
                logits[:, self.eos] = -torch.inf
        return self.draw(F.softmax(logits, dim=-1))

    def draw(self, scores: torch.Tensor) -> torch.Tensor:
        if self.race is not None:
            return self.race.draw(scores)
        if self.manual_seed is None:
            return draw_unseeded(scores) if self.own_draws else torch.multinomial(scores, num_samples=1)
        return torch.multinomial(scores, num_samples=1, generator=self.generator.manual_seed(self.manual_seed))

    def append(self, tokens: torch.Tensor, i: int) -> None:
        """Record step i's tokens [rows, 1] in the repetition window (last `window` tokens)."""
        if not self.window:
            return
        self.freq.scatter_add_(1, tokens, self.ones)
        if i >= self.window:
            self.freq.scatter_add_(1, self.history[:, i - self.window : i - self.window + 1], -self.ones)


class Race:
    """A seeded request's draws: torch.multinomial(scores, 1, generator=generator.manual_seed(seed)) at every step,
    with the race's noise q drawn once per shape of scores (the generator is left as such a draw leaves it)."""

    def __init__(self, generator: torch.Generator, seed: int):
        self.generator, self.seed = generator, seed
        self.noise: torch.Tensor | None = None

    def draw(self, scores: torch.Tensor) -> torch.Tensor:
        refuse_non_finite(scores.sum(-1))  # a NaN or inf anywhere in a row reaches its sum
        if self.noise is None or self.noise.shape != scores.shape:
            self.noise = exponential_noise(scores, self.generator.manual_seed(self.seed))
        return torch.argmax(scores / self.noise, dim=-1, keepdim=True)


def draw_unseeded(scores: torch.Tensor) -> torch.Tensor:
    """One token per row of scores [..., V] (each row a distribution, as softmax leaves it), drawn with torch's global
    generator by inverting the row's running sum at a uniform number: torch.multinomial's distribution, for one random
    number a row where multinomial's race draws one per entry (48 us a [4, 626] row group, 19 ns a value)."""
    cdf = scores.cumsum(-1)  # never decreasing: every term is >= 0
    total = cdf[..., -1:].contiguous()
    refuse_non_finite(total)  # a NaN or inf anywhere in a row reaches its sum
    drawn = torch.searchsorted(cdf, torch.rand(total.shape, dtype=cdf.dtype, device=cdf.device) * total, right=True)
    # a uniform number that rounds onto the sum finds no entry above it: the last token with any probability then
    return torch.where(drawn < cdf.size(-1), drawn, torch.searchsorted(cdf, total))


def refuse_non_finite(values: torch.Tensor) -> None:
    if not torch.isfinite(values).all():  # what torch.multinomial refuses, refused alike
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")


def exponential_noise(scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.empty_like(scores).exponential_(1, generator=generator)


@functools.cache
def multinomial_is_a_race() -> bool:
    """Whether torch.multinomial's one-sample draw is argmax(p / q), q ~ Exp(1) from the generator (torch's CPU
    kernel since 1.13), tried on rows with zeros, ties and one certain token under several seeds."""
    probabilities = torch.rand(6, 50, generator=torch.Generator().manual_seed(0))
    probabilities[1, 10:] = 0
    probabilities[2] = 1
    probabilities[3] = torch.nn.functional.one_hot(torch.tensor(7), 50)
    probabilities = probabilities / probabilities.sum(-1, keepdim=True)
    for seed in range(8):
        by_torch = torch.multinomial(probabilities, 1, generator=torch.Generator().manual_seed(seed))
        noise = exponential_noise(probabilities, torch.Generator().manual_seed(seed))
        if not torch.equal(by_torch, torch.argmax(probabilities / noise, dim=-1, keepdim=True)):
            log.info("torch %s's multinomial draws otherwise: seeded draws call it every step", torch.__version__)
            return False
    return True


def sample_rows(samplers: list[Sampler], logits: torch.Tensor, steps: list[int]) -> list[torch.Tensor] | None:
    """Each row's next tokens [q, 1], the very ones its own `sample(logits[j], steps[j])` draws, computed together
    (continuous batching: one sampler a row, each with its own settings). None when some row's chain is another
    than ChatTTS's usual one (repetition penalty, then top-P and top-K): the caller samples row by row.

    Why: a row's sampling is some 30 tensor ops on a [4, 626] tensor, each costing its dispatch more than its
    arithmetic: row by row, about a fifth of a decode step at 8 rows (cProfile). Per-row settings become per-row
    columns (temperature, penalty, top-P's limit, top-K as a mask over the largest top-K of any row), every op is
    row-wise, and each row still draws with its own generator and seed."""
    chains = [s.chain for s in samplers]
    if any(c is None for c in chains) or len({(c.get("penalty") is None, c["keep"]) for c in chains}) > 1 \
            or len({s.eos for s in samplers}) > 1:
        return None
    q = logits.size(1)
    x = logits.reshape(-1, logits.size(-1)) / torch.cat([s.temperature for s in samplers])
    early = [i < s.min_new_token for s, i in zip(samplers, steps)]
    if all(s.fused is not None for s in samplers):
        tables = [s.penalty_tables for s in samplers]
        x = samplers[0].fused.sampling_filter(
            x, [f for counts, _ in tables for f in counts], [a for _, alphas in tables for a in alphas],
            torch.cat([s.limit for s in samplers]), torch.cat([s.top_k for s in samplers]), chains[0]["keep"],
            samplers[0].eos, torch.cat([s.early_rows[e] for s, e in zip(samplers, early)]))
    else:
        x = _filter_rows(samplers, chains, x, q, early)
    scores = F.softmax(x, dim=-1).view(len(samplers), q, -1)
    together = [j for j, s in enumerate(samplers) if s.manual_seed is None and s.own_draws]
    drawn = {j: s.draw(scores[j]) for j, s in enumerate(samplers) if j not in together}
    if together:  # the unseeded rows, in one call
        drawn.update(zip(together, draw_unseeded(scores[together])))
    return [drawn[j] for j in range(len(samplers))]


def _filter_rows(samplers: list[Sampler], chains: list[dict], x: torch.Tensor, q: int, early: list[bool]):
    """sample_rows' chain as torch ops: per-row settings as per-row columns, every op row-wise."""
    per_row = lambda values, dtype: torch.tensor(values, dtype=dtype).repeat_interleave(q).view(-1, 1)  # noqa: E731
    if chains[0].get("penalty") is not None:
        alpha = torch.pow(per_row([c["penalty"] for c in chains], torch.float32), torch.cat([s.freq for s in samplers]))
        x = torch.where(x < 0, x * alpha, x / alpha)
    k = min(max(c["top_k"] for c in chains), x.size(-1))
    top = torch.topk(x, k).values
    p = (top.double() - torch.logsumexp(x.double(), -1, keepdim=True)).exp()
    kept = (1 - (p.cumsum(-1) - p)).float() > per_row([1 - c["top_p"] for c in chains], torch.float32)
    kept &= torch.arange(k) < per_row([c["top_k"] for c in chains], torch.long)
    kept[:, : chains[0]["keep"]] = True
    x = x.masked_fill(x < top.gather(1, kept.sum(-1, keepdim=True) - 1), -torch.inf)
    x[per_row(early, torch.bool).view(-1), samplers[0].eos] = -torch.inf
    return x


def _top_p_then_top_k(first, second) -> bool:
    """True for ChatTTS's warper pair: top-P directly followed by top-K, both filling with -inf."""
    _, TopP, TopK = _stock_processors()
    return (isinstance(first, TopP) and isinstance(second, TopK)
            and first.filter_value == second.filter_value == -float("inf"))
