"""What the stages outside the GPT's decode steps cost (docs/measurements/2026-12-04-decode-stages.md), per format of
the decoder's and vocoder's ConvNeXt projections, on full-size synthetic weights, lab int8, 2 threads:

1. a 128-token batch-1 call: its stages (median and best of 3 calls after a warm-up);
2. the decoder and vocoder of 128 tokens alone, and a streamed chunk decode (`decode_chunks` started afresh:
   LEFT_CONTEXT tokens before, HOLD after, as the continuous loop decoded chunks until 2026-12-05) per call size,
   1/2/4/8 rows x 16/32/64 new tokens, and the fixed cost per call that a least-squares line through them gives
   (ms = fixed + per_token x tokens decoded in the call). These in CPU time on one thread (best of 5): on a machine
   others share, wall time on two threads measured the neighbours (the line's fixed cost came out negative), CPU
   time of one thread the work;
3. with --profile, torch.profiler's top operators of a 128-token decode and of a 1-row 16-token chunk.

    python scripts/probes/decode_stages.py fp32,bf16,int8 [--profile] [--no-call]

To imitate an AVX2-only CPU on an AVX-512 one, prefix
    CHATTTS_LAB_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
    FBGEMM_ENABLE_INSTRUCTIONS=AVX2
(bf16 is then emulated by oneDNN: leave it out there)."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np
import torch

import chattts_lab.engines.lab.vocoder as vocoder
from chattts_lab.engines.lab.chunk_decode import decode_chunks
from chattts_lab.engines.lab.stream import HOLD, LEFT_CONTEXT
from chattts_lab.metrics import SAMPLES_PER_TOKEN
from chattts_lab.models import LoadConfig, load_model, unload_all
from chattts_lab.requests import Sampling, SynthesisRequest
from chattts_lab.synthesis import synthesize

TEXT = "The quick brown fox jumps over the lazy dog, twice before dinner."
FORMATS = {"fp32": lambda device: None, "bf16": lambda device: vocoder.Bf16Projection,
           "int8": lambda device: (lambda linear: vocoder.Int8Projection(linear, vocoder.many_rows_int8()))}


def best_cpu_ms(run, repeats: int = 5) -> float:
    """The least CPU time of this thread over `repeats` runs (after one to warm up); torch on one thread."""
    run()
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        run()
        times.append(time.thread_time() - t0)
    return min(times) * 1e3


def whole_call(model) -> None:
    req = SynthesisRequest.of(TEXT, max_new_token=128, min_new_token=128, sampling=Sampling(audio_seed=1))
    synthesize(model, req)
    runs = [synthesize(model, req).measurements for _ in range(3)]
    for name, pick in (("median", statistics.median), ("best", min)):
        stages = {k: pick(getattr(m.stages, k) for m in runs) for k in ("prefill_s", "decoder_s", "vocoder_s")}
        outside = pick(m.wall_s - m.stages.decode_s for m in runs)
        print(f"  128-token call ({name} of 3): outside the steps {outside * 1e3:.0f} ms: "
              + ", ".join(f"{k[:-2]} {v * 1e3:.0f} ms" for k, v in stages.items()))


def chunk_table(chat) -> None:
    hiddens = torch.randn(400, 768)  # a row's GPT hidden states (the full-size GPT is 768 wide)
    whole = best_cpu_ms(lambda: chat._decode_to_wavs([hiddens[:128].clone()], True))
    print(f"  decoder + vocoder of 128 tokens, one call: {whole:.1f} ms CPU (one thread)")
    sizes, costs = [], []
    for rows in (1, 2, 4, 8):
        line = []
        for new in (16, 32, 64):
            a = SAMPLES_PER_TOKEN * 100
            spans = [(hiddens, 300, a, a + SAMPLES_PER_TOKEN * new, None)] * rows  # afresh: LEFT_CONTEXT again
            ms = best_cpu_ms(lambda: decode_chunks(chat, spans, LEFT_CONTEXT, HOLD))
            sizes.append(rows * (new + LEFT_CONTEXT + HOLD))
            costs.append(ms)
            line.append(f"{new} tokens {ms:6.1f} ms")
        print(f"  chunk decode, {rows} row(s), ms CPU (one thread): " + ", ".join(line))
    per_token, fixed = np.polyfit(sizes, costs, 1)
    print(f"  fit: {fixed:.1f} ms a call + {per_token:.3f} ms a token decoded (left and right context included)")


def profile(chat) -> None:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    for tokens in (128, 16 + LEFT_CONTEXT + HOLD):
        h = torch.randn(tokens, 768)
        chat._decode_to_wavs([h.clone()], True)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            chat._decode_to_wavs([h.clone()], True)
        print(f"  profile of one {tokens}-token decode:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))


def main() -> None:
    for name in sys.argv[1].split(","):
        vocoder.projection_format = FORMATS[name]  # what install_quantized_decoding converts to
        model = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
        print(f"{name}: decoder {model.effective['dtype_decoder']}; GPT {model.effective['kernels']}")
        with torch.inference_mode():
            if "--no-call" not in sys.argv:  # (a call's wall time on a shared machine measures the neighbours)
                whole_call(model)
            torch.set_num_threads(1)  # this thread's pool; the model's own thread keeps its 2
            chunk_table(model.chat)
            if "--profile" in sys.argv:
                profile(model.chat)
        unload_all()


main()
