"""What a shared chunk decode (DVAE decoder + Vocos, engines/lab/chunk_decode.py) costs, by rows and new tokens, on
full-size synthetic weights, 2 threads: chunks that carry their frames from the last chunk (as the continuous loop
decodes them now) against chunks that decode LEFT_CONTEXT tokens again before their new ones (as it did before
2026-12-05). Each also decodes HOLD tokens for their right context.
Run from the checkout: python scripts/probes/chunk_decode_cost.py [int4|int8|fp32]"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

from chattts_lab.engines.lab.chunk_decode import decode_chunks
from chattts_lab.engines.lab.stream import HOLD, LEFT_CONTEXT
from chattts_lab.metrics import SAMPLES_PER_TOKEN as T
from chattts_lab.models import LoadConfig, load_model

model = load_model(LoadConfig(model="synthetic", precision=(sys.argv[1:] or ["int4"])[0], engine="lab", threads=2))
chat = model.chat
hiddens = torch.randn(300, 768)  # a row's GPT hidden states (the full-size GPT is 768 wide)
START = 100  # tokens already sent


def median_ms(run, repeats: int = 11) -> float:
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


with torch.inference_mode():
    (_, state), = decode_chunks(chat, [(hiddens, START + HOLD, 0, T * START, None)], LEFT_CONTEXT, HOLD)
    print(f"{model.effective['dtype_decoder']}, torch threads {torch.get_num_threads()}")
    for rows in (1, 2, 4, 8):
        for new in (12, 24, 48):
            n, a, b = START + new + HOLD, T * START, T * (START + new)
            again = median_ms(lambda: decode_chunks(chat, [(hiddens, n, a, b, None)] * rows, LEFT_CONTEXT, HOLD))
            carried = median_ms(lambda: decode_chunks(chat, [(hiddens, n, a, b, state)] * rows, LEFT_CONTEXT, HOLD))
            print(f"{rows} row(s) x {new:2d} new tokens: context decoded again {again:6.1f} ms, "
                  f"frames carried {carried:6.1f} ms ({carried / again:.2f}x)")
