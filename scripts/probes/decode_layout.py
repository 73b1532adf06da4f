"""Where a chunk decode's time goes outside the projections, and what a (batch, time, channels) layout saves.

Stock ChatTTS's decoder and Vocos run each ConvNeXt block in (B, C, T) for its depthwise convolution and transpose
to (B, T, C) for the norm and projections and back: strided copies in every block. This probe times one decode call
of the continuous loop's shape (rows x (LEFT_CONTEXT + new + HOLD) tokens) as installed (lab int8: int8
projections), then with the lab's time-major blocks (engines/lab/time_major.py), and checks that both give the
same audio. CPU time of this thread on one thread (the work, robust to neighbours), or with --wall the wall time
on two threads (what the serving loop waits for), best of 7.

    python scripts/probes/decode_layout.py [--wall] [--profile]
"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import numpy as np
import torch

from chattts_lab.engines.lab import time_major
from chattts_lab.engines.lab.stream import HOLD, LEFT_CONTEXT
from chattts_lab.models import LoadConfig, load_model


WALL = "--wall" in sys.argv
CLOCK = time.perf_counter if WALL else time.thread_time
UNIT = "wall, 2 threads" if WALL else "CPU, 1 thread"


def best_ms(run, repeats: int = 7) -> float:
    run()
    times = []
    for _ in range(repeats):
        t0 = CLOCK()
        run()
        times.append(CLOCK() - t0)
    return min(times) * 1e3


def calls(chat, rows: int, new: int) -> list[torch.Tensor]:
    torch.manual_seed(rows * 100 + new)
    return [torch.randn(LEFT_CONTEXT + new + HOLD, 768) for _ in range(rows)]


def profile(chat, parts) -> None:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    chat._decode_to_wavs([p.clone() for p in parts], True)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        chat._decode_to_wavs([p.clone() for p in parts], True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))


def main() -> None:
    model = load_model(LoadConfig(model="synthetic", precision="int8", engine="lab", threads=2))
    chat = model.chat
    print(f"decoder {model.effective['dtype_decoder']}; installed: {time_major.installed(chat)}")
    torch.set_num_threads(2 if WALL else 1)
    shapes = [(1, 12), (4, 12), (8, 12), (8, 24), (1, 128)]
    with torch.inference_mode():
        for rows, new in shapes:  # the two layouts alternate, so that a neighbour's load falls on both
            parts, ms, wav = calls(chat, rows, new), {False: [], True: []}, {}
            for _ in range(3):
                for on in (False, True):
                    time_major.set_installed(chat, on)
                    ms[on].append(best_ms(lambda: chat._decode_to_wavs([p.clone() for p in parts], True)))
                    wav[on] = np.asarray(chat._decode_to_wavs([p.clone() for p in parts], True))
            stock, tm = min(ms[False]), min(ms[True])
            diff = np.abs(wav[True] - wav[False]).max() / max(np.abs(wav[False]).max(), 1e-9)
            print(f"{rows} x {new:3d} new tokens: as stock {stock:6.1f} ms, time-major {tm:6.1f} ms {UNIT} "
                  f"({stock / tm:.2f}x; largest difference {diff:.1e} of the peak)", flush=True)
        if "--profile" in sys.argv:
            for on in (False, True):
                time_major.set_installed(chat, on)
                print(f"profile, 8 x 12, {'time-major' if on else 'as stock'}:")
                profile(chat, calls(chat, 8, 12))

main()
