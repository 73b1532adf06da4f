"""Where a 128-token batch-1 call goes outside the GPT's decode steps (prefill, DVAE decoder, Vocos), and which modules
of the decoder and vocoder take it, on full-size synthetic weights (median of 3 calls after a warm-up). To imitate an
AVX2-only CPU on an AVX-512 one, run it as

    CHATTTS_LAB_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python scripts/probes/stages_outside_gpt.py lab:int8 --fp32-projections

(--fp32-projections: the decoder's and vocoder's projections as ChatTTS has them, what the lab ran before it put them
in int8; scripts/probes/decode_stages.py compares every format)."""
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import chattts_lab.engines.lab.vocoder as vocoder
from chattts_lab.models import LoadConfig, load_model, unload_all
from chattts_lab.requests import Sampling, SynthesisRequest
from chattts_lab.synthesis import synthesize

TEXT = "The quick brown fox jumps over the lazy dog, twice before dinner."


def request() -> SynthesisRequest:
    """The 128-token batch-1 call these probes time (scripts/probes/outside_gpt_floor.py counts its work)."""
    return SynthesisRequest.of(TEXT, max_new_token=128, min_new_token=128, sampling=Sampling(audio_seed=1))


def time_leaf_modules(chat) -> dict:
    """Wall time per (decoder or vocos, module type), filled in by forward hooks on every leaf module."""
    spent, started = collections.defaultdict(float), {}
    for part, root in (("decoder", chat.decoder), ("vocos", chat.vocos)):
        for module in root.modules():
            if not list(module.children()):
                module.register_forward_pre_hook(lambda m, i: started.__setitem__(id(m), time.perf_counter()))
                module.register_forward_hook(lambda m, i, o, part=part: spent.__setitem__(
                    (part, type(m).__name__), spent[(part, type(m).__name__)] + time.perf_counter() - started[id(m)]))
    return spent


def time_config(config: str) -> None:
    """One engine:precision: the stages of the call (median of 3 after a warm-up) and its slowest leaf modules."""
    engine, precision = config.split(":")
    model = load_model(LoadConfig(model="synthetic", precision=precision, engine=engine, threads=2))
    spent = time_leaf_modules(model.chat)
    req = request()
    synthesize(model, req)
    spent.clear()
    runs = [synthesize(model, req).measurements for _ in range(3)]
    stages = {k: statistics.median(getattr(m.stages, k) for m in runs) for k in runs[0].stages.as_dict()}
    wall = statistics.median(m.wall_s for m in runs)
    print(f"{config} [{model.effective['kernels']}]: wall {wall:.3f} s, {runs[0].gpt_steps} steps; outside the decode "
          f"steps {wall - stages['decode_s']:.3f} s: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in stages.items()))
    for (part, kind), seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {part:8s} {kind:20s} {seconds / 3 * 1e3:7.1f} ms a call")
    unload_all()


def main():
    if "--fp32-projections" in sys.argv:
        vocoder.projection_format = lambda device: None
    for config in sys.argv[1].split(","):
        time_config(config)


if __name__ == "__main__":
    main()
