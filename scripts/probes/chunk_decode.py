"""What a chunk's decode costs (2026-12-02): ChatTTS's decoder and vocoder over N tokens of hidden states, batch 1/4/8,
full-size synthetic weights, on the torch thread with 2 threads.
Run from the checkout: python scripts/probes/chunk_decode.py  (see 2026-12-02-engine-thread.md)"""
import os, sys, time, torch
sys.path.insert(0, os.getcwd())
from chattts_lab.models import LoadConfig, load_model
from chattts_lab import torch_thread
m = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
def probe():
    torch.set_num_threads(2)
    H = m.chat.config.gpt.hidden_size if hasattr(m.chat.config.gpt, "hidden_size") else 768
    for n in (32, 56, 80, 136):
        for b in (1, 4, 8):
            parts = [torch.randn(n, H) for _ in range(b)]
            m.chat._decode_to_wavs([p.clone() for p in parts], True)
            ts = []
            for _ in range(3):
                t = time.perf_counter(); m.chat._decode_to_wavs([p.clone() for p in parts], True); ts.append(time.perf_counter() - t)
            print(f"tokens {n:4d} batch {b}: {min(ts)*1000:7.1f} ms  per row {min(ts)*1000/b:6.1f}")
torch_thread.run(probe)
