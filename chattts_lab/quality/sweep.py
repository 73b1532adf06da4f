"""Quality beside speed in a sweep: every (device, engine, precision) of the grid speaks the same fixed texts with the
same voices and seeds as the reference, stock fp32 on the same device, and each clip is scored against the
reference's clip of the same text and voice.

    make_clips (one worker per configuration: load, speak, write WAVs) --> score_sweep (one worker: load the
    quality models once, score every clip) --> one record per configuration --> columns of its cells

Quality is a property of the configuration, measured at batch 1: every cell of a configuration (any batch, threads,
tokens) carries its record. On synthetic weights the clips are noise: the measures still run (so their cost is
real), but the record keeps no figure, only the note that it is not meaningful.
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

from chattts_lab.engines import REFERENCE
from chattts_lab.quality import DELTA_COLUMNS, FIGURE_COLUMNS, NOT_MEANINGFUL, to_16k
from chattts_lab.sweep.results import AUDIO_SEED, VOICE_SEED

log = logging.getLogger(__name__)
# A fixed set by length, so a sweep can show what each precision costs short and long texts.
QUALITY_TEXTS = (
    ("short", "Please call me back tomorrow."),
    ("medium", "The quick brown fox jumps over the lazy dog, and then it takes a short rest in the sun."),
    ("long", "When the train finally left the station, the passengers settled into their seats, opened their "
             "books and watched the green fields and quiet villages slide past the window for almost an hour."),
)
QUALITY_VOICES = (VOICE_SEED, 11)  # the benchmark's own speaker and one more
SYNTHETIC_QUALITY_TOKENS = 48  # at least this long (1 s) a quality clip of random weights, which never stop by themselves


def clip_plan() -> list[dict]:
    return [{"length": length, "text": text, "voice": voice} for length, text in QUALITY_TEXTS
            for voice in QUALITY_VOICES]


def config_key(device: str, engine: str, precision: str) -> str:
    return f"{device}|{engine}|{precision}"


def make_clips(cfg, folder: str | Path, synthetic_tokens: int) -> dict:
    """In a worker: load the configuration, speak every planned clip, write each as a WAV in `folder`.
    Real weights stop where the text ends; random weights never stop, so they speak exactly `synthetic_tokens`."""
    import soundfile as sf

    from chattts_lab.models import LoadConfig, load_model
    from chattts_lab.requests import MAX_NEW_TOKEN, Sampling, SynthesisRequest, Voice
    from chattts_lab.synthesis import SAMPLE_RATE, speaker_from_seed, synthesize

    model = load_model(LoadConfig(model=cfg.model, device=cfg.device, precision=cfg.precision, threads=cfg.threads,
                                  engine=cfg.engine))
    tokens = dict(max_new_token=synthetic_tokens, min_new_token=synthetic_tokens) if model.synthetic else dict(
        max_new_token=MAX_NEW_TOKEN)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for clip in clip_plan():
        request = SynthesisRequest.of(clip["text"], voice=Voice(speaker=speaker_from_seed(model, clip["voice"])),
                                      sampling=Sampling(audio_seed=AUDIO_SEED), **tokens)
        out = synthesize(model, request)
        path = folder / f"{clip['length']}-voice{clip['voice']}.wav"
        sf.write(str(path), out.audio[0], SAMPLE_RATE)
        clips.append({**clip, "path": str(path), "tokens": out.measurements.tokens[0],
                      "audio_s": out.measurements.audio_s[0], "wall_s": out.measurements.wall_s})
    return {"synthetic": model.synthetic, "dtype_gpt": model.effective.get("dtype_gpt"), "clips": clips}


def score_sweep(made: dict[str, dict], reference_of: dict[str, str]) -> dict[str, dict]:
    """In a worker: every configuration's clips scored against its reference's clip of the same text and voice.
    `made`: config key -> what make_clips returned; `reference_of`: config key -> its reference's key."""
    import soundfile as sf

    from chattts_lab.quality import measures

    load_s = measures.load_all()

    def audio(clip: dict):
        data, rate = sf.read(clip["path"], dtype="float32")
        return to_16k(data, rate)

    references: dict = {}
    records = {}
    for key, record in made.items():
        ref_clips = made[reference_of[key]]["clips"]
        scored = []
        for clip, ref_clip in zip(record["clips"], ref_clips):
            if ref_clip["path"] not in references:
                references[ref_clip["path"]] = measures.Reference.of(audio(ref_clip))
            t0 = time.perf_counter()
            figures = measures.score_clip(audio(clip), clip["text"], references[ref_clip["path"]])
            if record["synthetic"]:  # noise: keep what scoring cost and where it failed, no figure to misread
                figures = {k: figures[k] for k in ("cpu_s", "errors")}
            scored.append({**clip, **figures, "score_wall_s": time.perf_counter() - t0})
        records[key] = {"clips": scored, "synthetic": record["synthetic"], "reference": reference_of[key],
                        "models": measures.models(), "models_load_s": load_s}
    return records


def summarise(records: dict[str, dict]) -> dict[str, dict]:
    """Config key -> the columns its cells carry: means over clips, deltas from the reference, the models, and on
    synthetic weights no figure at all but the note."""
    out = {}
    for key, rec in records.items():
        models = "; ".join(f"{kind}: {name}" for kind, name in rec["models"].items())
        base = {"quality_clips": len(rec["clips"]), "quality_models": models}
        if rec["synthetic"]:
            out[key] = {**base, "quality_note": NOT_MEANINGFUL}
            continue
        out[key] = {**base, **_means(rec["clips"]), "quality_note": ""}
    for key, columns in out.items():
        ref = out[records[key]["reference"]]
        for delta, column in DELTA_COLUMNS.items():
            if columns.get(column) is not None and ref.get(column) is not None:
                columns[delta] = columns[column] - ref[column]
    return out


def _means(clips: list[dict]) -> dict:
    scale = {"quality_wer_pct": 100.0}  # WER in percent, so "2 points" reads as it is said
    out = {}
    for column, figure in FIGURE_COLUMNS.items():
        values = [c[figure] for c in clips if c.get(figure) is not None]
        out[column] = statistics.fmean(values) * scale.get(column, 1.0) if values else None
    return out


def by_length(records: dict[str, dict]) -> list[dict]:
    """One row per (configuration, text length): the figures of its clips, for the length axis."""
    rows = []
    for key, rec in records.items():
        if rec["synthetic"]:
            continue
        for length, _ in QUALITY_TEXTS:
            clips = [c for c in rec["clips"] if c["length"] == length]
            rows.append({"config": key, "length": length, **_means(clips)})
    return rows


# ----------------------------------------------------------------------------------------------
# In the sweep: run after the cells (chattts_lab.sweep.runner.run_sweep), each step in a fresh worker process


def run_quality(spec, sweep_id: int, store, stop, folder: Path):
    """Each configuration's clips in a fresh process (the references, stock fp32 per device, first), then one
    process scores them all; the cells get their configuration's columns, the sweep keeps every clip's figures."""
    from chattts_lab.sweep.events import QualityFinished, QualityStarted

    if "quality" in store.notes(sweep_id):  # a resumed sweep scored before
        return
    if spec.cluster:  # the clips would be spoken here, not on the nodes that timed the cells
        store.set_note(sweep_id, "quality", {"records": {}, "failed": {}, "by_length": [],
                                             "skipped": "quality is not measured on fleet sweeps yet"})
        return
    made, failed, reference_of = {}, {}, {}
    for what in _speak_all(spec, sweep_id, stop, folder, made, failed, reference_of):
        yield QualityStarted(sweep_id, what)
    records = {}
    if made and not stop():
        yield QualityStarted(sweep_id, f"scoring {len(made)} configuration(s)")
        records = _score_all(spec, stop, made, reference_of, failed)
    if stop():  # stopped: nothing kept, so a resumed sweep speaks and scores again
        return
    columns = {**summarise(records),
               **{k: {"quality_note": f"quality not measured: {why}"[:500]} for k, why in failed.items()}}
    store.set_note(sweep_id, "quality", {"records": records, "failed": failed, "by_length": by_length(records),
                                         "texts": dict(QUALITY_TEXTS), "voices": list(QUALITY_VOICES)})
    store.set_cell_quality(sweep_id, columns)
    yield QualityFinished(sweep_id, columns)


def _quality_config(spec, device: str, engine: str, precision: str):
    from chattts_lab.sweep.results import RunConfig

    tokens = max(min(spec.tokens), SYNTHETIC_QUALITY_TOKENS)
    return RunConfig(spec.model, device, precision, 1, spec.fidelity_threads(), tokens, engine)


def _speak_all(spec, sweep_id: int, stop, folder: Path, made: dict, failed: dict, reference_of: dict):
    """Speak every configuration's clips (filling `made`, `failed`, `reference_of`); yields what it starts."""
    from chattts_lab.sweep.spec import cell_rule
    from chattts_lab.sweep.supervisor import run_child

    triples = dict.fromkeys([(d, *REFERENCE) for d in dict.fromkeys(spec.devices)] + spec.fidelity_pairs())
    for device, engine, precision in triples:
        key, reference = config_key(device, engine, precision), config_key(device, *REFERENCE)
        cfg = _quality_config(spec, device, engine, precision)
        ruled = cell_rule(cfg)
        if ruled or (key != reference and reference not in made):
            failed[key] = ruled[1] if ruled else f"its reference ({reference}) was not made: {failed.get(reference)}"
            continue
        if stop():
            return
        yield f"speaking {cfg.device} {cfg.engine} {cfg.precision}"
        task = {"kind": "quality-clips", "config": cfg.to_dict(), "synthetic_tokens": cfg.tokens,
                "folder": str(folder / f"sweep-{sweep_id}" / key.replace("|", "-"))}
        outcome = run_child(task, spec.timeout_s, cfg.threads, stop)
        if outcome.status != "ok":
            failed[key] = f"{outcome.status}: {outcome.reason}"
            continue
        made[key], reference_of[key] = outcome.payload["quality"], reference


def _score_all(spec, stop, made: dict, reference_of: dict, failed: dict) -> dict:
    from chattts_lab.sweep.supervisor import run_child

    cfg = _quality_config(spec, "cpu", *REFERENCE)
    task = {"kind": "quality-score", "config": cfg.to_dict(), "made": made, "reference_of": reference_of}
    outcome = run_child(task, spec.timeout_s, cfg.threads, stop)
    records = outcome.payload.get("quality") or {}
    failed.update({k: f"scoring failed: {outcome.status}: {outcome.reason}" for k in made if k not in records})
    return records
