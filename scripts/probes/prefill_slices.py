"""What a newcomer's prefill costs the rows running beside it, whole and in slices (issue 41, chunked prefill;
2026-12-04): full-size synthetic weights, 2 threads, 3 rows admitted and stepping, then a newcomer's prompt
(PROMPT tokens of text, about 50 positions with its speaker) prefilled whole, or `fill`ed SLICE positions at a time
with one step of the 3 rows between slices. Prints the median ms of a 3-row step, a whole prefill and each slice
size's slices, R rounds interleaved. Engines and precisions as PAIRS of E:P, default lab:int8.
Run from the checkout: python scripts/probes/prefill_slices.py (see docs/measurements/2026-12-04-capacity-trace.md)"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest, torch_thread  # noqa: E402
from chattts_lab.models import LoadConfig, load_model, set_threads  # noqa: E402
from chattts_lab.synthesis import chattts_params, warm_up  # noqa: E402

ROUNDS = int(os.environ.get("R", 5))
SLICES = [int(s) for s in os.environ.get("SLICES", "8,16,24,32").split(",")]
PAIRS = [p.split(":") for p in os.environ.get("PAIRS", "lab:int8").split(",")]
TEXT = "A listener who arrives while three others are already listening, and wants to hear it at once."


def prompt(model, decoder):
    request = SynthesisRequest.of(TEXT, max_new_token=512, min_new_token=512)
    params_code, params_refine = chattts_params(model, request)
    return decoder.prompt(TEXT, params_refine, params_code, False, True)


def one_round(model, figures: dict) -> None:
    decoder = model.engine.row_decoder(model.chat, 4)
    newcomer = prompt(model, decoder)
    for _ in range(3):
        decoder.admit(newcomer)
    for _ in range(24):
        decoder.step()
    for size in [None] + SLICES:
        row = decoder.begin(newcomer)
        done = False
        while not done:
            t = time.perf_counter()
            done = decoder.fill(row, size)
            figures.setdefault(size or "whole", []).append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            decoder.step()
            figures.setdefault("step", []).append((time.perf_counter() - t) * 1e3)
        decoder.release(row)
    figures["prompt"] = [newcomer.length]


def main() -> None:
    for engine, precision in PAIRS:
        model = load_model(LoadConfig(model="synthetic", engine=engine, precision=precision, threads=2))
        warm_up(model)
        figures: dict = {}
        for _ in range(ROUNDS):
            set_threads(2)
            torch_thread.run(lambda: one_round(model, figures))
        cells = ", ".join(f"{k}: {statistics.median(v):.1f}" for k, v in figures.items() if k != "prompt")
        print(f"{engine} {precision}, prompt {figures['prompt'][0]} positions, median ms: {cells}", flush=True)


if __name__ == "__main__":
    main()
