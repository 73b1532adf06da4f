"""The lab's draws (lab and onnx engines): a seeded request's tokens are torch.multinomial's with its generator
re-seeded every step, as stock draws them; an unseeded row's follow its probabilities. No model loads here."""
import pytest
import torch

from chattts_lab.engines.lab import sampler
from chattts_lab.engines.lab.sampler import Race, draw_unseeded, multinomial_is_a_race


def test_a_seeded_draw_is_torch_multinomials_at_every_step_and_leaves_the_generator_as_it_does():
    """Stock re-seeds before each step's torch.multinomial; the lab draws the race's noise once and divides: the same
    tokens at every step (rows with few candidates, as top-K leaves them, and a new shape), the generator left in the
    same state, and a NaN refused as torch refuses it."""
    assert multinomial_is_a_race()  # else the lab calls torch.multinomial every step, and this test means nothing
    torch.manual_seed(0)
    by_stock, by_race = torch.Generator(), torch.Generator()
    race = Race(by_race, 1234)
    for step, rows in enumerate((8, 8, 8, 3, 3)):
        logits = torch.randn(rows, 626) * 3
        logits[:, torch.randperm(626)[: 600 - step]] = -torch.inf  # top-K's few candidates, another set each step
        scores = torch.softmax(logits, -1)
        want = torch.multinomial(scores, 1, generator=by_stock.manual_seed(1234))
        assert torch.equal(race.draw(scores), want), step
    assert torch.equal(by_race.get_state(), by_stock.get_state())
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan`"):
        race.draw(torch.full((3, 626), torch.nan))


def test_an_unseeded_draw_follows_each_rows_probabilities_and_never_draws_a_token_without_any(monkeypatch):
    torch.manual_seed(0)
    probabilities = torch.tensor([[0.5, 0.3, 0.2, 0.0, 0.0], [0.0, 0.0, 0.1, 0.0, 0.9]])
    drawn = torch.cat([draw_unseeded(probabilities) for _ in range(4000)], -1)  # [2, 4000]
    for row, p in zip(drawn, probabilities):
        share = torch.bincount(row, minlength=5) / row.numel()
        assert ((share - p).abs() < 0.025).all() and (share[p == 0] == 0).all(), share
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan`"):
        draw_unseeded(torch.full((2, 5), torch.nan))
    # a uniform number that rounds onto the row's sum: the last token with any probability, not the one after it
    monkeypatch.setattr(torch, "rand", lambda shape, dtype, device: torch.ones(shape, dtype=dtype))
    assert draw_unseeded(probabilities).tolist() == [[2], [4]]


def test_the_race_check_fails_where_the_noise_is_not_multinomials(monkeypatch):
    monkeypatch.setattr(sampler, "exponential_noise", lambda scores, generator: torch.ones_like(scores))
    assert sampler.multinomial_is_a_race.__wrapped__() is False  # then every draw calls torch.multinomial


def test_a_seeded_sampler_on_cpu_races_and_an_unseeded_one_draws_by_its_sums():
    def made(seed):
        return sampler.Sampler([], torch.ones(4, 1), 4, 626, eos=625, min_new_token=0, manual_seed=seed,
                               generator=torch.Generator(), history=torch.zeros(4, 1, dtype=torch.long))

    seeded, unseeded = made(7), made(None)
    assert seeded.race is not None and unseeded.race is None
    scores = torch.softmax(torch.randn(4, 626), -1)
    torch.manual_seed(3)
    want = draw_unseeded(scores)
    torch.manual_seed(3)
    assert torch.equal(unseeded.draw(scores), want)
