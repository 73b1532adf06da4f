"""Writes tests/data/quality-espeak-bundle.json: a history that holds quality rows, for the browser test.

The quality figures are real measures (chattts_lab.quality) of espeak-ng speech made on the machine, each
configuration standing in as one clip, clean or degraded; the speeds are this project's measured RTFs of
2026-12-01 (shared/FACTS.md, full-size synthetic weights, 2 cores). Nothing here is a verdict on ChatTTS: the bundle's
model name says what it is.

    python tests/data/make_quality_bundle.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from chattts_lab.trackers.env import capture_environment  # noqa: E402
from chattts_lab.quality import measures  # noqa: E402
from chattts_lab.quality.sweep import config_key, summarise  # noqa: E402
from chattts_lab.sweep.results import RunConfig, summarize  # noqa: E402
from chattts_lab.sweep.spec import SweepSpec  # noqa: E402
from chattts_lab.history.bundle import export_bundle
from chattts_lab.history.store import Store  # noqa: E402
from tests.support.espeak_speech import SENTENCE, quantized, speak, with_noise  # noqa: E402

MODEL = "espeak-ng stand-ins (test data)"
AUDIO_S = 2.72  # 128 tokens
# (engine, precision): (measured RTF, peak RSS MB, what the clip is)
CONFIGS = {
    ("stock", "fp32"): (3.39, 2030, "clean"),
    ("lab", "fp32"): (1.34, 1400, "clean"),
    ("stock", "int8"): (1.08, 1530, "noise 30 dB"),
    ("lab", "int8"): (0.37, 900, "noise 20 dB"),
    ("lab", "int4"): (0.29, 700, "quantized"),
}
CLIPS = {"clean": lambda a: a, "noise 30 dB": lambda a: with_noise(a, 30.0), "noise 20 dB": lambda a: with_noise(a, 20.0),
         "quantized": quantized}


def main(out: Path) -> None:
    clean = speak(SENTENCE)
    reference = measures.Reference.of(clean)
    records = {}
    for (engine, precision), (_, _, clip) in CONFIGS.items():
        scored = measures.score_clip(CLIPS[clip](clean), SENTENCE, reference)
        records[config_key("cpu", engine, precision)] = {
            "clips": [{"length": "medium", "text": SENTENCE, "voice": clip, **scored}], "synthetic": False,
            "reference": config_key("cpu", "stock", "fp32"), "models": measures.models()}
    columns = summarise(records)
    spec = SweepSpec(model=MODEL, engines=("stock", "lab"), precisions=("fp32", "int8", "int4"), threads=(2,),
                     quality=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "lab.sqlite"
        with Store(db) as store:
            sweep_id = store.create_sweep(spec.to_dict(), capture_environment(), status="finished")
            for index, ((engine, precision), (rtf, rss, _)) in enumerate(CONFIGS.items()):
                cfg = RunConfig(MODEL, "cpu", precision, 1, 2, 128, engine)
                sample = {"phase": "timed", "wall_s": rtf * AUDIO_S, "audio_s": AUDIO_S, "peak_rss_mb": rss}
                store.add_cell(sweep_id, index, summarize(cfg, "ok", "", {"samples": [sample]}))
            store.set_note(sweep_id, "quality", {"records": records, "stand_ins": {
                f"{e} {p}": clip for (e, p), (_, _, clip) in CONFIGS.items()}})
            store.set_cell_quality(sweep_id, columns)
        export_bundle(db, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(ROOT / "tests" / "data" / "quality-espeak-bundle.json")
