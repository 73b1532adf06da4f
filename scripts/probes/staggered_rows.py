"""A continuous-batching step when rows are of different ages, as in a serving loop, against rows that started
together (2026-12-05): full-size synthetic weights, E=lab (default) or onnx, P=int8 (default) or another precision,
2 threads. K rows (default 6): "staggered"
admits one every GAP steps (default 40), so the oldest holds about K*GAP more slots than the youngest; "together"
admits all at once and steps until their mean length is the staggered rows' mean. Then N steps of each are timed
(R rounds, alternating), and split into the model's forward, the copy of the behind rows' keys and values to their
own slots, and the rest (heads, sampling). Run from the checkout: python scripts/probes/staggered_rows.py
(see docs/measurements/2026-12-05-own-slots.md)"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
from chattts_lab import SynthesisRequest, torch_thread  # noqa: E402
from chattts_lab.models import LoadConfig, load_model  # noqa: E402
from chattts_lab.synthesis import chattts_params, warm_up  # noqa: E402

K, GAP, N, ROUNDS = (int(os.environ.get(k, d)) for k, d in (("K", 6), ("GAP", 40), ("N", 32), ("R", 3)))
TEXT = "A listener who arrives alone and wants to hear it at once."


class Clock:
    """Wall time spent inside one method of an object, summed."""

    def __init__(self, owner, name):
        self.total, inner = 0.0, getattr(owner, name)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                self.total += time.perf_counter() - t
        setattr(owner, name, timed)


def decoder_with_rows(model, staggered: bool):
    budget = K * GAP + N + 8
    request = SynthesisRequest.of(TEXT, max_new_token=budget, min_new_token=budget)
    params_code, params_refine = chattts_params(model, request)
    decoder = model.engine.row_decoder(model.chat, K)
    prompt = decoder.prompt(TEXT, params_refine, params_code, False, True)
    for i in range(K):
        decoder.admit(prompt)
        for _ in range(GAP if staggered else 0):
            decoder.step()
    if not staggered:  # the staggered rows' mean age: GAP * (K + 1) / 2 steps
        for _ in range(GAP * (K + 1) // 2):
            decoder.step()
    return decoder


def timed_steps(model, staggered: bool) -> dict:
    decoder = decoder_with_rows(model, staggered)
    forward, behind = Clock(decoder.model, "forward"), Clock(decoder, "_copy_behind")
    lengths = [r.length for r in decoder.active]
    t = time.perf_counter()
    for _ in range(N):
        decoder.step()
    wall = time.perf_counter() - t
    return dict(step=wall / N * 1e3, forward=forward.total / N * 1e3, behind=behind.total / N * 1e3,
                slots=f"{min(lengths)}-{max(lengths)} (mean {statistics.fmean(lengths):.0f})")


def main():
    model = load_model(LoadConfig(model="synthetic", precision=os.environ.get("P", "int8"),
                                  engine=os.environ.get("E", "lab"), threads=2))
    warm_up(model)
    print(f"{model.config.engine} {model.config.precision}, {K} rows, GAP {GAP}, kernels: {model.engine.kernels}")
    seen = {True: [], False: []}
    for _ in range(ROUNDS):
        for staggered in (True, False):
            seen[staggered].append(timed_steps(model, staggered))
    for staggered, runs in seen.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("step", "forward", "behind")}
        print(f"{'staggered' if staggered else 'together '}: slots {runs[0]['slots']}; step {med['step']:.2f} ms "
              f"(forward {med['forward']:.2f}, copy behind {med['behind']:.2f}, rest "
              f"{med['step'] - med['forward'] - med['behind']:.2f}); rounds {[round(r['step'], 2) for r in runs]}")


if __name__ == "__main__":
    torch_thread.run(main)  # where the app runs model work: one OpenMP pool (chattts_lab/torch_thread.py)
