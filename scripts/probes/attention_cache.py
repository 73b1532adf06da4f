"""A decode step's attention at full ChatTTS size (20 layers of 12 heads of 64), per KV cache format: fp32, bf16 and
int8 lines (chattts_lab/engines/lab/kv_cache.py), B rows at a given cache length, in interleaved rounds; medians.
Each format has its own caches, so what one format read is gone from the CPU's caches when the next reads (in a real
step the layer's weights pass through in between). RESIDENT=1 reuses one layer's caches instead: the arithmetic
alone. STEP=1 times whole steps instead: K rows (default 8) of a continuous batch on full-size synthetic weights
(P=int4 or int8), one row decoder with a bf16 cache and one with int8 lines on the same model, stepped in turn.
Run from the checkout:

    B=1,8 ENDS=40,100,170 python scripts/probes/attention_cache.py
    STEP=1 K=8 N=128 P=int4 python scripts/probes/attention_cache.py

(docs/measurements/2026-12-05-int8-kv-cache.md)"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from chattts_lab.engines.lab import kernels, kv_cache  # noqa: E402

LAYERS, HEADS, HEAD_DIM, SLOTS = 20, 12, 64, 1024
FORMATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.int8}


def caches(rows: int, dtype) -> list:
    layers = []
    for _ in range(1 if os.environ.get("RESIDENT") else LAYERS):
        pair = [kv_cache.allocate(rows, HEADS, SLOTS, HEAD_DIM, dtype, "cpu") for _ in "kv"]
        for cache in pair:
            kv_cache.write(cache, 0, torch.randn(rows, HEADS, SLOTS, HEAD_DIM))
        layers.append(pair)
    return layers * (LAYERS // len(layers))


def attention():
    torch.set_num_threads(int(os.environ.get("THREADS", 2)))
    lab = kernels.load()
    print(f"kernels: {lab.simd()}, {torch.get_num_threads()} threads")
    for rows in [int(b) for b in os.environ.get("B", "1,8").split(",")]:
        for end in [int(e) for e in os.environ.get("ENDS", "40,100,170").split(",")]:
            own = {name: caches(rows, dtype) for name, dtype in FORMATS.items()}
            qkv, rot = torch.randn(rows, 3 * HEADS * HEAD_DIM), torch.randn(rows, HEAD_DIM // 2, 2)
            valid = torch.empty(0, dtype=torch.bool)
            times = {name: [] for name in FORMATS}
            for _ in range(int(os.environ.get("ROUNDS", 40))):
                for name, layers in own.items():
                    t0 = time.perf_counter()
                    for k, v in layers:
                        lab.decode_attention(qkv, rot, k, v, end - 1, end, valid)
                    times[name].append(time.perf_counter() - t0)
            print(f"{rows} rows, {end} positions, {LAYERS} layers: "
                  + "  ".join(f"{name} {statistics.median(t) * 1e3:.2f} ms" for name, t in times.items()), flush=True)


def steps():
    from chattts_lab import SynthesisRequest
    from chattts_lab.models import LoadConfig, load_model
    from chattts_lab.synthesis import chattts_params, warm_up

    rows, n = int(os.environ.get("K", 8)), int(os.environ.get("N", 128))
    text = "A listener who arrives alone and wants to hear it at once."
    model = load_model(LoadConfig(model="synthetic", precision=os.environ.get("P", "int4"), engine="lab", threads=2))
    warm_up(model)
    code, refine = chattts_params(model, SynthesisRequest.of(text, max_new_token=n + 16, min_new_token=n + 16))
    decoders = {}
    for name in ("bf16", "int8"):
        model.engine.gpt_module.cache_dtype = FORMATS[name]  # the format reset_cache allocates in
        decoders[name] = model.engine.row_decoder(model.chat, rows)
        prompt = decoders[name].prompt(text, refine, code, False, True)
        for _ in range(rows):
            decoders[name].admit(prompt)
    times = {name: [] for name in decoders}
    for i in range(n):
        for name, decoder in (decoders.items() if i % 2 else reversed(decoders.items())):
            t0 = time.perf_counter()
            decoder.step()
            times[name].append(time.perf_counter() - t0)
    print(f"{model.config.precision}, {rows} rows, kernels: {model.engine.kernels}")
    for half in (slice(0, n // 2), slice(n // 2, n)):
        print(f"  steps {half.start}-{half.stop} (positions {prompt.length + half.start}-{prompt.length + half.stop}): "
              + "  ".join(f"{name} {statistics.median(t[half]) * 1e3:.2f} ms" for name, t in times.items()))


if __name__ == "__main__":
    if os.environ.get("STEP"):
        from chattts_lab import torch_thread

        torch_thread.run(steps)  # where the app runs model work: one OpenMP pool (chattts_lab/torch_thread.py)
    else:
        attention()
