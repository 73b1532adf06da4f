"""A streamed clip against its whole decode: chunks that start afresh with each left context, and chunks that carry
their frames (engines/lab/chunk_decode.py, no context decoded again). Random hidden states stand in for a generation:
the seams depend on the decoder's and vocoder's reach, not on what the GPT said. The chunks follow the continuous
loop's usual schedule (a first chunk at 24 tokens, then 12 at a time), HOLD tokens held back from each.

SCALE=x sets every ConvNeXt block's layer scale to x: the synthetic checkpoint keeps ConvNeXt's initial 1e-6, which
leaves the blocks nearly silent and the convolutions' reach short; trained weights weigh them in.
2026-12-05 (Zen 4, full-size, fp32): with the checkpoint's scale, 3.5e-5 of the peak for a left context of 8, 16, 32
and for carried frames, 76 % afresh with none; with SCALE=1, 9.1 % for all of them (the right context cut at HOLD,
not the left, sets it), with SCALE=0.1, 0.48 %.
Run from the checkout: python scripts/probes/seam_bound.py [fp32|int8|int4]  (M=synthetic-tiny for the tiny weights)"""
import os
import sys

sys.path.insert(0, os.getcwd())
import numpy as np
import torch

from chattts_lab.engines.lab.chunk_decode import decode_chunks
from chattts_lab.engines.lab.stream import HOLD
from chattts_lab.metrics import SAMPLES_PER_TOKEN, samples_for_tokens
from chattts_lab.models import LoadConfig, load_model

N = 200
SCHEDULE = [24 + 12 * i for i in range(N // 12)] + [N]

model = load_model(LoadConfig(model=os.environ.get("M", "synthetic"), precision=(sys.argv[1:] or ["fp32"])[0],
                              engine="lab", threads=2))
chat = model.chat
if "SCALE" in os.environ:
    for block in [m for part in (chat.decoder, chat.vocos) for m in part.modules()
                  if type(m).__name__ == "ConvNeXtBlock"]:
        (block.gamma if hasattr(block, "gamma") else block.weight).data.fill_(float(os.environ["SCALE"]))
hiddens = torch.randn(N, chat.decoder.decoder.conv_in[0].in_channels * 2, generator=torch.Generator().manual_seed(0))
with torch.inference_mode():
    whole = np.asarray(chat._decode_to_wavs([hiddens.clone()], True))[0]


def streamed(left: int, carry: bool) -> np.ndarray:
    parts, state, sent = [], None, 0
    for k in sorted({min(k, N) for k in SCHEDULE}):
        b = samples_for_tokens(N) if k == N else SAMPLES_PER_TOKEN * (k - HOLD)
        (audio, next_state), = decode_chunks(chat, [(hiddens, k, sent, b, state if carry else None)], left, HOLD)
        parts.append(audio)
        state, sent = next_state, b
    return np.concatenate(parts)


peak = np.abs(whole).max()
print(f"{model.effective['dtype_decoder']}; layer scale {os.environ.get('SCALE', 'as the checkpoint')}")
for name, audio in [(f"afresh, left {left}", streamed(left, False)) for left in (32, 16, 8, 4, 0)] + [
        ("carried frames, left 0", streamed(0, True))]:
    diff = np.abs(audio - whole)
    print(f"{name:24s} largest difference {diff.max() / peak:.2e} of the peak, rms {np.sqrt((diff ** 2).mean()):.2e}")
