"""The lab's sampler: ChatTTS's usual chain (repetition penalty, top-P, top-K, the end-token mask) in one call of the
lab's kernels gives the torch ops' values exactly, alone and for rows sampled together."""
import pytest
import torch

from chattts_lab.engines.lab import kernels
from chattts_lab.engines.lab.sampler import Sampler, sample_rows

fused = kernels.load()
pytestmark = pytest.mark.skipif(fused is None, reason="the lab's kernels do not build here")
VOCAB, WINDOW, EOS = 626, 16, 625


def chain(penalty: float | None, top_p: float, top_k: int):
    from ChatTTS.model.processors import CustomRepetitionPenaltyLogitsProcessorRepeat
    from transformers.generation import TopKLogitsWarper, TopPLogitsWarper

    warpers = [TopPLogitsWarper(top_p, min_tokens_to_keep=3), TopKLogitsWarper(top_k, min_tokens_to_keep=3)]
    return ([CustomRepetitionPenaltyLogitsProcessorRepeat(penalty, VOCAB, WINDOW)] if penalty else []) + warpers


def sampler(processors, rows: int, kernels_module, counts: torch.Tensor | None, temperature: float = 0.7,
            min_new_token: int = 4) -> Sampler:
    s = Sampler(processors, torch.full((rows, 1), temperature), rows, VOCAB, eos=EOS, min_new_token=min_new_token,
                manual_seed=7, generator=torch.Generator(), history=torch.zeros(rows, 64, dtype=torch.long),
                fused=kernels_module)
    if counts is not None:
        s.freq.copy_(counts)
    s.draw = lambda scores: scores  # the probabilities the draw would see
    return s


def logits_and_counts(rows: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    spread = torch.tensor([0.3, 1.0, 3.0, 10.0]).repeat(rows)[:rows, None]  # flat to peaked rows
    logits = torch.randn(rows, VOCAB, generator=g) * spread
    counts = torch.zeros(rows, VOCAB, dtype=torch.long)
    for r in range(rows):  # a window's tokens, some repeated, counts up to the window itself
        tokens = torch.randint(0, 40, (WINDOW,), generator=g)
        tokens[: r % 3 * 8] = tokens[0]
        counts[r].scatter_add_(0, tokens, torch.ones(WINDOW, dtype=torch.long))
    return logits, counts


@pytest.mark.parametrize("penalty", [1.05, None])
@pytest.mark.parametrize("step", [0, 9])  # before min_new_token (the end token masked) and after
def test_one_call_gives_the_torch_chains_probabilities(penalty, step):
    for seed in range(6):
        logits, counts = logits_and_counts(4, seed)
        processors = chain(penalty, 0.7, 20)
        want = sampler(processors, 4, None, counts if penalty else None).sample(logits, step)
        one = sampler(processors, 4, fused, counts if penalty else None)
        assert one.fused is not None and (one.window == WINDOW) == bool(penalty)
        got = one.sample(logits, step)
        assert torch.equal(got, want)
        if step == 0:  # before min_new_token; later the end token may still fall outside top-K
            assert (got[:, EOS] == 0).all()
        kept = (got > 0).sum(-1)
        assert kept.min() >= 3 and kept.max() <= 20


def test_rows_sampled_together_get_what_each_samples_alone():
    """Rows of different settings (temperature, penalty, top-P, top-K, step) in one call: each row's probabilities
    are those its own sampler computes, with the kernels and without."""
    settings = [(1.05, 0.7, 20, 0.7, 0), (1.2, 0.9, 5, 1.0, 9), (1.05, 0.5, 40, 0.3, 2)]
    rows = []
    for j, (penalty, top_p, top_k, temperature, step) in enumerate(settings):
        logits, counts = logits_and_counts(4, 10 + j)
        processors = chain(penalty, top_p, top_k)
        rows.append((processors, logits, counts, temperature, step))
    logits = torch.stack([r[1] for r in rows])
    steps = [r[4] for r in rows]
    for module in (fused, None):
        samplers = [sampler(p, 4, module, c, temperature=t) for p, _, c, t, _ in rows]
        together = sample_rows(samplers, logits, steps)
        alone = [sampler(p, 4, module, c, temperature=t).sample(x, i) for p, x, c, t, i in rows]
        for a, b in zip(together, alone):
            assert torch.equal(a, b)
    fused_rows = sample_rows([sampler(p, 4, fused, c, temperature=t) for p, _, c, t, _ in rows], logits, steps)
    torch_rows = sample_rows([sampler(p, 4, None, c, temperature=t) for p, _, c, t, _ in rows], logits, steps)
    for a, b in zip(fused_rows, torch_rows):
        assert torch.equal(a, b)


def test_a_count_beyond_the_window_is_refused_not_read_past_the_table():
    logits, counts = logits_and_counts(4, 0)
    one = sampler(chain(1.05, 0.7, 20), 4, fused, counts)
    one.freq[1, 3] = WINDOW + 1
    with pytest.raises(RuntimeError, match="beyond the penalty's window"):
        one.sample(logits, 9)
