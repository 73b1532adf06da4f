"""A GPT step of k continuous-batching rows against a request-level batch of k texts (2026-12-04): full-size synthetic
weights, 2 threads, k rows admitted together then stepped N times, against ChatTTS's `_infer_code` generating the
same k texts as one batch (prefill included, N tokens each), and the rows again without the runtime's
`generating()` (onnx: torch kept at 2 threads through the steps). Engines and precisions as PAIRS of E:P, default
onnx:int4,lab:int8; calls interleaved, R rounds. Run from the checkout: python scripts/probes/rows_vs_batch.py
(see docs/measurements/2026-12-04-onnx-continuous.md)"""
import os
import sys
import time
from contextlib import nullcontext

sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest, torch_thread  # noqa: E402
from chattts_lab.models import LoadConfig, load_model, set_threads  # noqa: E402
from chattts_lab.synthesis import chattts_params, warm_up  # noqa: E402

N, ROUNDS = int(os.environ.get("N", 64)), int(os.environ.get("R", 3))
PAIRS = [p.split(":") for p in os.environ.get("PAIRS", "onnx:int4,lab:int8").split(",")]
TEXT = "A listener who arrives alone and wants to hear it at once."


def rows(model, k: int) -> float:
    request = SynthesisRequest.of(TEXT, max_new_token=N + 1, min_new_token=N + 1)
    params_code, params_refine = chattts_params(model, request)
    decoder = model.engine.row_decoder(model.chat, k)
    for _ in range(k):
        decoder.admit(decoder.prompt(TEXT, params_refine, params_code, False, True))
    t = time.perf_counter()
    for _ in range(N):
        decoder.step()
    return (time.perf_counter() - t) / N * 1000


def rows_threads_kept(model, k: int) -> float:
    model.engine.generating = nullcontext
    try:
        return rows(model, k)
    finally:
        del model.engine.generating


def batch(model, k: int) -> float:
    request = SynthesisRequest.of(TEXT, max_new_token=N, min_new_token=N)
    chat = model.chat
    text = chat.normalizer(TEXT, True, True, None)
    t = time.perf_counter()
    next(chat._infer_code([text] * k, False, chat.device, True, chattts_params(model, request)[0]))
    return (time.perf_counter() - t) / N * 1000


def main() -> None:
    models = {}
    for engine, precision in PAIRS:
        config = LoadConfig(model="synthetic", engine=engine, precision=precision, threads=2)
        models[engine, precision] = load_model(config)
        warm_up(models[engine, precision])
    for r in range(ROUNDS):
        for (engine, precision), model in models.items():
            set_threads(2)
            cells = [f"{k}: rows {rows(model, k):5.1f}, kept {rows_threads_kept(model, k):5.1f}, batch "
                     f"{batch(model, k):5.1f}" for k in (1, 4, 8)]
            print(f"round {r} {engine} {precision} ms per step: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    from chattts_lab import models as _models

    _models.MAX_CACHED = len(PAIRS)
    torch_thread.run(main)
