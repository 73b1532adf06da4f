"""An independent cross-check of one stock configuration, sharing no measurement code with the sweep.

    python -m bench.independent --model synthetic --threads 2 --tokens 128 --repeats 3
    python -m bench.independent --model synthetic --threads 2 --tokens 128 --interleave 5   # vs the sweep's cell

It loads ChatTTS through chattts_lab (loading only), then times `Chat.infer` itself with perf_counter
and the GPT's steps with a forward hook (the median gap between consecutive decode forwards), in this
process. A sweep cell of the same configuration should agree within the machine's noise; with
--interleave the sweep's own worker for that cell runs alongside, one call each per pass, so the ratio
between the two is measured at the same moments (the sweep worker is used as the sweep runs it; no
timing code is shared).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time


TEXT = ["The quick brown fox jumps over the lazy dog, and then it takes a short rest."]


def stopwatch(model: str, threads: int, tokens: int, precision: str = "fp32"):
    """Load the model here and return call(): one timed `Chat.infer`, as (wall seconds, median decode step ms)."""
    import torch

    from chattts_lab.models import LoadConfig, load_model

    torch.set_num_threads(threads)
    chat = load_model(LoadConfig(model=model, device="cpu", precision=precision, threads=threads)).chat
    stamps: list[float] = []
    chat.gpt.gpt.register_forward_hook(lambda *_: stamps.append(time.perf_counter()))
    torch.manual_seed(2)
    speaker = chat.sample_random_speaker()
    params = chat.InferCodeParams(spk_emb=speaker, max_new_token=tokens, min_new_token=tokens, manual_seed=42,
                                  show_tqdm=False)

    def call() -> tuple[float, float]:
        stamps.clear()
        t0 = time.perf_counter()
        chat.infer(TEXT, skip_refine_text=True, split_text=False, params_infer_code=params)
        wall = time.perf_counter() - t0
        gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]  # decode steps only (stamps[0] ends prefill)
        return wall, statistics.median(gaps) * 1000

    return call


def audio_seconds(tokens: int) -> float:
    return (2 * tokens - 1) * 256 / 24_000  # written out here on purpose: no shared formula


def measure(model: str, threads: int, tokens: int, repeats: int, precision: str = "fp32", warmup: int = 1) -> dict:
    import torch

    call = stopwatch(model, threads, tokens, precision)
    for _ in range(1 + warmup):  # the cold call and the warm-up calls, not counted
        call()
    walls, steps = zip(*(call() for _ in range(repeats)))
    wall = statistics.median(walls)
    return {"threads": torch.get_num_threads(), "tokens": tokens, "walls_s": list(walls), "wall_p50_s": wall,
            "step_ms": statistics.median(steps), "rtf": wall / audio_seconds(tokens)}


def interleaved(model: str, threads: int, tokens: int, passes: int, precision: str = "fp32", warmup: int = 1) -> dict:
    """This stopwatch and a sweep worker of the same stock cell, loaded side by side, one call each per pass
    in a fresh random order; the ratio between them with a paired bootstrap interval."""
    from chattts_lab.history.compare import speed_ratio
    from chattts_lab.sweep.results import RunConfig
    from chattts_lab.sweep.supervisor import CellWorker

    never = lambda: False  # noqa: E731  (nothing here stops a run but Ctrl-C)
    cfg = RunConfig(model, "cpu", precision, 1, threads, tokens, warmup=warmup)
    worker = CellWorker(cfg)
    try:
        worker.ready(never)
        call = stopwatch(model, threads, tokens, precision)
        for _ in range(1 + warmup):
            call()
        rng, orders, mine, cell = random.Random(), [], [], []
        for pass_no in range(passes):
            order = rng.sample(["independent", "sweep_cell"], k=2)
            orders.append(order)
            for position, side in enumerate(order):
                if side == "independent":
                    mine.append(call()[0])
                else:
                    cell.append(worker.repeat({"pass": pass_no, "position": position}, never)["wall_s"])
        worker.finish(never)
    finally:
        worker.kill()
    ratio = speed_ratio(cell, mine, paired=True)
    return {"threads": threads, "tokens": tokens, "precision": precision, "orders": orders,
            "independent_walls_s": mine, "sweep_cell_walls_s": cell,
            "independent_rtf": statistics.median(mine) / audio_seconds(tokens),
            "sweep_cell_rtf": statistics.median(cell) / audio_seconds(tokens),
            "ratio": ratio.as_dict(), "phrase": ratio.phrase("the sweep cell", "the independent stopwatch")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.independent")
    p.add_argument("--model", default="synthetic")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--interleave", type=int, default=0, metavar="PASSES",
                   help="also run the sweep's worker for this stock cell and alternate with it for PASSES passes "
                        "(a fresh random order each), reporting the ratio between them with a 95%% interval")
    a = p.parse_args(argv)
    if a.interleave:
        if a.interleave < 2:
            p.error("--interleave needs at least 2 passes for an interval")
        print(json.dumps(interleaved(a.model, a.threads, a.tokens, a.interleave, a.precision, a.warmup)))
    else:
        print(json.dumps(measure(a.model, a.threads, a.tokens, a.repeats, a.precision, a.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
