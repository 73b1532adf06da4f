"""Predicted MOS: Microsoft's DNSMOS (P.835 signal/background/overall and P.808), ONNX models in `speechmos`.

`speechmos.dnsmos.run` keeps one module-level session and rebuilds it only when the model path changes, but it
slides a 9.01 s window in 1 s hops over a short clip repeated by doubling (a 4 s clip becomes 16 s and 7 windows).
Here one `DNSMOS` object is cached and a clip shorter than the window is tiled to exactly one window: the first
window `run` scores, at a seventh of the cost. Longer clips are scored as `run` scores them (every hop).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from chattts_lab.quality import RATE, package_version

WINDOW_S = 9.01  # speechmos.dnsmos.INPUT_LENGTH: the models' fixed input


@functools.lru_cache(maxsize=1)
def load():
    from speechmos import dnsmos

    folder = os.path.join(os.path.dirname(os.path.abspath(dnsmos.__file__)), "dnsmos_models")
    return dnsmos.DNSMOS(os.path.join(folder, "sig_bak_ovr.onnx"), os.path.join(folder, "model_v8.onnx"))


def model_info() -> str:
    return f"DNSMOS P.835 sig_bak_ovr + P.808 model_v8 (speechmos {package_version('speechmos')})"


def score(audio: np.ndarray) -> dict:
    """{"dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak", "dnsmos_p808"} (1-5, higher is better) of 16 kHz audio."""
    audio = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    if not audio.size or not np.any(audio):
        raise ValueError("the clip is empty or silent")
    window = int(WINDOW_S * RATE)
    if len(audio) < window:
        audio = np.tile(audio, window // len(audio) + 1)[:window]
    out = load()(audio, RATE, False)
    return {"dnsmos_ovrl": float(out["ovrl_mos"]), "dnsmos_sig": float(out["sig_mos"]),
            "dnsmos_bak": float(out["bak_mos"]), "dnsmos_p808": float(out["p808_mos"])}
