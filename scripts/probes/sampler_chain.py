"""A step's sampling as ChatTTS's usual chain (repetition penalty 1.05 over a 16-token window, top-P 0.7, top-K 20,
then softmax and the seeded draw) on 4 x 626 logits a row, with the lab's kernels (`sampling_filter`, one call) and
as torch ops, at 1 row (`Sampler.sample`) and 8 rows (`sample_rows`); 2 threads, mean of 2000 calls. Run from the
checkout: python scripts/probes/sampler_chain.py (docs/measurements/2026-12-05-avx2-step.md)"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from ChatTTS.model.processors import CustomRepetitionPenaltyLogitsProcessorRepeat  # noqa: E402
from transformers.generation import TopKLogitsWarper, TopPLogitsWarper  # noqa: E402

from chattts_lab.engines.lab import kernels  # noqa: E402
from chattts_lab.engines.lab.sampler import Sampler, sample_rows  # noqa: E402

VOCAB, WINDOW, Q = 626, 16, 4
torch.set_num_threads(2)


def sampler(fused) -> Sampler:
    chain = [CustomRepetitionPenaltyLogitsProcessorRepeat(1.05, VOCAB, WINDOW),
             TopPLogitsWarper(0.7, min_tokens_to_keep=3), TopKLogitsWarper(20, min_tokens_to_keep=3)]
    s = Sampler(chain, torch.full((Q, 1), 0.7), Q, VOCAB, eos=VOCAB - 1, min_new_token=4, manual_seed=7,
                generator=torch.Generator(), history=torch.zeros(Q, 64, dtype=torch.long), fused=fused)
    s.freq.copy_(torch.randint(0, 3, (Q, VOCAB)))
    return s


def mean_ms(call, n: int = 2000) -> float:
    for _ in range(50):
        call()
    t = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t) / n * 1e3


logits = torch.randn(Q, VOCAB) * 3
for rows in (1, 8):
    for name, fused in (("torch ops", None), ("one kernel call", kernels.load())):
        samplers = [sampler(fused) for _ in range(rows)]
        if rows == 1:
            ms = mean_ms(lambda: samplers[0].sample(logits, 9))
        else:
            x = logits.expand(rows, Q, VOCAB).contiguous()
            ms = mean_ms(lambda: sample_rows(samplers, x, [9] * rows))
        print(f"{rows} row(s), {name:15s}: {ms:.3f} ms a step (filter, softmax, draw)")
