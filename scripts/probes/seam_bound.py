"""A streamed clip against its whole decode for each left context (2026-12-02, full-size synthetic weights, lab int8:
the same largest difference, 0.02 % of the peak, at 24/16/12/8 tokens; 0.23 % at 4; 77 % at 0). Random hidden states
stand in for a generation: the seams depend on the decoder's and vocoder's reach, not on what the GPT said.
Run from the checkout: python scripts/probes/seam_bound.py  (M=synthetic-tiny for the tiny weights)"""
import sys, time, os
sys.path.insert(0, os.getcwd())
import numpy as np, torch
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.engines.lab.stream import _decode_span, SAMPLES_PER_TOKEN, HOLD
from chattts_lab.metrics import samples_for_tokens
def chunk_due(k):  # the loop's schedule when this was measured: first at 24 tokens, every 24 until 144, then 48
    return k >= 24 and k % 24 == 0 if k < 144 else k % 48 == 0


model = load_model(LoadConfig(model=os.environ.get("M", "synthetic"), precision="int8", engine="lab", threads=2))
chat = model.chat
torch.manual_seed(0)
n = 256
h = torch.randn(n, 768) * 0.5
whole = np.asarray(chat._decode_to_wavs([h.clone()], True))[0]
print("whole", whole.shape, "rms", float(np.sqrt((whole**2).mean())), "peak", float(abs(whole).max()))
for left in (24, 16, 12, 8, 4, 0):
    sent, parts, seams, t_dec = 0, [], [], 0.0
    for k in range(1, n + 1):
        if k < n and not chunk_due(k):
            continue
        upto = samples_for_tokens(n) if k == n else SAMPLES_PER_TOKEN * max(0, k - HOLD)
        if upto <= sent: continue
        t = time.perf_counter()
        parts.append(_decode_span(chat, [h[:k].clone()], [k], sent, upto, left)[0]); t_dec += time.perf_counter() - t
        seams.append(sent); sent = upto
    s = np.concatenate(parts)
    d = np.abs(s - whole)
    print(f"left {left:2d}: chunks {len(parts)}, decode {t_dec*1000:.0f} ms total, max |diff| {d.max():.2e} "
          f"({d.max()/abs(whole).max()*100:.3f} % of peak), rms diff {np.sqrt((d**2).mean()):.2e}", flush=True)
