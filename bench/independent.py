"""An independent cross-check of one stock configuration, sharing no measurement code with the sweep.

    python -m bench.independent --model synthetic --threads 2 --tokens 128 --repeats 3

It loads ChatTTS through chattts_lab (loading only), then times `Chat.infer` itself with perf_counter
and the GPT's steps with a forward hook (the median gap between consecutive decode forwards), in this
process. A sweep cell of the same configuration should agree within the machine's noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def measure(model: str, threads: int, tokens: int, repeats: int, precision: str = "fp32", warmup: int = 1) -> dict:
    import torch

    from chattts_lab.models import LoadConfig, load_model

    torch.set_num_threads(threads)
    chat = load_model(LoadConfig(model=model, device="cpu", precision=precision, threads=threads)).chat
    stamps: list[float] = []
    hook = chat.gpt.gpt.register_forward_hook(lambda *_: stamps.append(time.perf_counter()))
    torch.manual_seed(2)
    speaker = chat.sample_random_speaker()
    params = chat.InferCodeParams(spk_emb=speaker, max_new_token=tokens, min_new_token=tokens, manual_seed=42,
                                  show_tqdm=False)
    text = ["The quick brown fox jumps over the lazy dog, and then it takes a short rest."]
    walls, steps = [], []
    uncounted = 1 + warmup  # the cold call and the warm-up calls
    for i in range(repeats + uncounted):
        stamps.clear()
        t0 = time.perf_counter()
        chat.infer(text, skip_refine_text=True, split_text=False, params_infer_code=params)
        wall = time.perf_counter() - t0
        if i >= uncounted:
            walls.append(wall)
            gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]  # decode steps only (stamps[0] ends prefill)
            steps.append(statistics.median(gaps) * 1000)
    hook.remove()
    audio_s = (2 * tokens - 1) * 256 / 24_000  # written out here on purpose: no shared formula
    wall = statistics.median(walls)
    return {"threads": torch.get_num_threads(), "tokens": tokens, "walls_s": walls, "wall_p50_s": wall,
            "step_ms": statistics.median(steps), "rtf": wall / audio_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.independent")
    p.add_argument("--model", default="synthetic")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args(argv)
    print(json.dumps(measure(a.model, a.threads, a.tokens, a.repeats, a.precision, a.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
