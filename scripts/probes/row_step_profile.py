"""Where a continuous batch's step goes besides the model: K rows (default 8) admitted together, stepped, then a
cProfile of N more steps (default 64; rows that reach their token budget end sooner), sorted by own time. Full-size
synthetic weights, E=lab (default) or onnx, P=int4 (default) or another precision, 2 threads, on the torch thread as
the app runs it. Run from the checkout: python scripts/probes/row_step_profile.py
(see docs/measurements/2026-12-05-avx2-step.md)"""
import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest, torch_thread  # noqa: E402
from chattts_lab.models import LoadConfig, load_model  # noqa: E402
from chattts_lab.synthesis import chattts_params, warm_up  # noqa: E402

K, N = int(os.environ.get("K", 8)), int(os.environ.get("N", 64))
TEXT = "A listener who arrives alone and wants to hear it at once."


def main():
    model = load_model(LoadConfig(model="synthetic", precision=os.environ.get("P", "int4"),
                                  engine=os.environ.get("E", "lab"), threads=2))
    warm_up(model)
    request = SynthesisRequest.of(TEXT, max_new_token=N + 16, min_new_token=N + 16)
    params_code, params_refine = chattts_params(model, request)
    decoder = model.engine.row_decoder(model.chat, K)
    prompt = decoder.prompt(TEXT, params_refine, params_code, False, True)
    for _ in range(K):
        decoder.admit(prompt)
    for _ in range(8):
        decoder.step()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(N):
        decoder.step()
    profile.disable()
    print(f"{model.config.engine} {model.config.precision}, {K} rows, kernels: {model.engine.kernels}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    torch_thread.run(main)  # where the app runs model work: one OpenMP pool (chattts_lab/torch_thread.py)
