"""What a step's draw costs inside real lab calls: torch.multinomial at every step (before 2026-12-05) against the
seeded race's noise drawn once (`sampler.Race`) and the unseeded rows' one-call draw (`sampler.draw_unseeded`).
Full-size synthetic weights, P=int4 (default) or another lab precision, 2 threads, B=8 texts of 128 tokens in one
static batch, seeded (SEED=7, default) or not (SEED=none); the two draws alternate R times (default 8) in one process,
so the machine's drift falls on both. Prints each call's ms a step and the draw's own ms a step (Sampler.draw timed).
Run from the checkout: python scripts/probes/sampler_draw.py (docs/measurements/2026-12-05-sampler-draws.md)"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from chattts_lab import SynthesisRequest  # noqa: E402
from chattts_lab.engines.lab import sampler  # noqa: E402
from chattts_lab.models import LoadConfig, load_model  # noqa: E402
from chattts_lab.requests import Sampling  # noqa: E402
from chattts_lab.synthesis import synthesize  # noqa: E402

PRECISION, ROWS, ROUNDS = os.environ.get("P", "int4"), int(os.environ.get("B", 8)), int(os.environ.get("R", 8))
SEED = None if os.environ.get("SEED", "7") == "none" else int(os.environ.get("SEED", "7"))
TEXT = "A listener who arrives alone and wants to hear it at once."


def multinomial_every_step(self, scores):
    """The draw before 2026-12-05: torch.multinomial, its generator re-seeded first when the request is seeded."""
    if self.manual_seed is None:
        return torch.multinomial(scores, num_samples=1)
    return torch.multinomial(scores, num_samples=1, generator=self.generator.manual_seed(self.manual_seed))


def timed(draw, spent):
    def call(self, scores):
        start = time.perf_counter()
        try:
            return draw(self, scores)
        finally:
            spent.append(time.perf_counter() - start)
    return call


def main() -> None:
    model = load_model(LoadConfig(model="synthetic", device="cpu", precision=PRECISION, threads=2, engine="lab"))
    request = SynthesisRequest.of([TEXT] * ROWS, max_new_token=128, min_new_token=128,
                                  sampling=Sampling(audio_seed=SEED))
    synthesize(model, request)  # warm
    lab_draw = sampler.Sampler.draw
    steps, draws = {"multinomial": [], "lab": []}, {"multinomial": [], "lab": []}
    for _ in range(ROUNDS):
        for name, draw in (("multinomial", multinomial_every_step), ("lab", lab_draw)):
            spent: list[float] = []
            sampler.Sampler.draw = timed(draw, spent)
            steps[name].append(synthesize(model, request).measurements.step_ms)
            draws[name].append(sum(spent) / len(spent) * 1e3)
    sampler.Sampler.draw = lab_draw
    pairs = [lab - old for old, lab in zip(steps["multinomial"], steps["lab"])]
    print(f"lab {PRECISION}, {ROWS} rows, seed {SEED}, {ROUNDS} rounds")
    for name in steps:
        print(f"  {name:12s} step ms {statistics.median(steps[name]):.2f} "
              f"({min(steps[name]):.2f}-{max(steps[name]):.2f}), draw ms a step {statistics.median(draws[name]):.3f}")
    print(f"  step, lab minus multinomial, paired: median {statistics.median(pairs):+.2f} ms "
          f"({min(pairs):+.2f} to {max(pairs):+.2f})")


if __name__ == "__main__":
    main()
