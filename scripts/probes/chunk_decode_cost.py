"""What one streamed chunk's decode (DVAE decoder + Vocos) costs by chunk size on full-size synthetic weights (lab
int8, 2 threads), decoded as the continuous loop decodes it (LEFT_CONTEXT tokens before, HOLD after).
Run from the checkout: python scripts/probes/chunk_decode_cost.py"""
import sys, time, statistics, os
sys.path.insert(0, os.getcwd())
import torch
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.engines.lab.stream import _decode_span, LEFT_CONTEXT, HOLD, SAMPLES_PER_TOKEN

model = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
chat = model.chat
h = torch.randn(300, 768) * 0.1  # GPT hidden states of 300 tokens (the full-size GPT is 768 wide)

def best(f, n=7):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3

for new in (6, 12, 24, 48):
    a = SAMPLES_PER_TOKEN * 100
    b = a + SAMPLES_PER_TOKEN * new
    ms = best(lambda: _decode_span(chat, [h[:200]], [200], a, b, LEFT_CONTEXT))
    print(f"chunk decode, {new} new tokens (+{LEFT_CONTEXT} left, +{HOLD} right context): {ms:.1f} ms "
          f"= {ms / new:.2f} ms per new token")
print("real time allows 21.3 ms per token per stream")
