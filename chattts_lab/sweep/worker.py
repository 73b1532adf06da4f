"""One benchmark cell in a fresh process: `main()`, in a process forked from a server that imported torch and
ChatTTS once (chattts_lab.sweep.launcher), or by hand `python -m chattts_lab.sweep.worker` < task.json.

The parent (`chattts_lab.sweep.supervisor.run_child`) writes one JSON task on stdin and reads one line on stdout
that starts with RESULT_MARKER; a failure comes back as a status, a reason and the full traceback. A
`serve` task (interleaved passes, `chattts_lab.sweep.supervisor.CellWorker`) stays loaded and answers one JSON
command line at a time, each with a PASS_MARKER line. Running each cell in its own process keeps peak memory, thread pools
and one-time costs (numba JIT, lazy mmaps) from leaking from one cell into the next. The worker
returns raw samples only; the parent derives the statistics.

Measurement protocol of a cell:
  load      load_model() timed as a whole (import, weights, precision conversion): `load_s`
  cold      the first call with the benchmark request, reported apart as `cold_s`, never counted
  warmup    `warmup` more calls, not counted
  timed     repeated until both `repeats` calls and `min_time_s` seconds are done (at most `max_repeats`)
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
import traceback
from typing import Callable

import psutil

from chattts_lab import torch_thread
from chattts_lab.trackers.env import load_average
from chattts_lab.limits import OutOfMemory, apply_memory_budget, out_of_memory_boundary
from chattts_lab.trackers.measure import repeat_until
from chattts_lab.sweep.results import AUDIO_SEED, PASS_MARKER, RESULT_MARKER, VOICE_SEED, RunConfig

log = logging.getLogger("chattts_lab.sweep.worker")


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, reason) for an exception raised while measuring a cell."""
    from chattts_lab.devices import DeviceUnavailable  # both import torch: not before the task needs it
    from chattts_lab.engines import UnsupportedPrecision

    if isinstance(exc, OutOfMemory):
        return "oom", str(exc)[:800]
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, UnsupportedPrecision):
        return "unsupported", str(exc)
    if isinstance(exc, DeviceUnavailable):
        return "skipped", str(exc)
    return "error", text[:800]


def _load_avg() -> float | None:
    return (load_average() or (None,))[0]


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def measure_cell(cfg, samples: list, info: dict) -> dict:
    """Load, warm up and time one cell; samples and info are filled in as it goes (kept on failure)."""
    run = prepare_cell(cfg, samples, info)
    info["extra"]["load_avg_before"] = _load_avg()  # other work on the machine: the first thing to check
    repeat_until(lambda: run("timed"), cfg.repeats, cfg.min_time_s, cfg.max_repeats)
    info["extra"]["load_avg_after"] = _load_avg()
    return finish_cell(cfg, samples, info)


def prepare_cell(cfg, samples: list, info: dict) -> Callable[..., dict]:
    """Load the model and make the cold and warm-up calls; returns run(phase) that makes one more call."""
    # torch, ChatTTS and the model code are imported here, in this order, so that the baseline RSS and
    # ChatTTS's import time are measured apart from the model's load.
    import torch

    from chattts_lab.trackers.measure import process_peak_rss_mb
    from chattts_lab.models import LoadConfig, load_model
    from chattts_lab.requests import Sampling, SynthesisRequest, Voice
    from chattts_lab.trackers.roofline import decode_weight_bytes
    from chattts_lab.synthesis import speaker_from_seed

    info["extra"] = extra = {"rss_baseline_mb": _rss_mb()}  # the runtime's own memory, before any model
    t0 = time.perf_counter()
    import ChatTTS  # noqa: F401  (imported apart: a one-time cost of the process, not of the model)

    extra["import_s"] = time.perf_counter() - t0
    if cfg.kernel_level:  # read when the engine builds its kernels, in this cell's own process
        from chattts_lab.engines import KERNEL_LEVEL_ENV

        os.environ[KERNEL_LEVEL_ENV] = cfg.kernel_level
    _apply_budget(cfg, extra)  # after the imports: the budget is for the model load and the calls, not the runtime
    t0 = time.perf_counter()
    model = load_model(LoadConfig(model=cfg.model, device=cfg.device, precision=cfg.precision, threads=cfg.threads,
                                  engine=cfg.engine, compile=cfg.compile))
    info["load_s"] = time.perf_counter() - t0
    info["effective"] = dict(model.effective)
    extra.update(
        rss_after_load_mb=_rss_mb(), peak_rss_load_mb=process_peak_rss_mb(), model_load_s=model.load_s,
        interop_threads=torch.get_num_interop_threads(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        source=model.source.label, synthetic=model.synthetic,
    )
    info["effective"]["weight_bytes_per_step"] = decode_weight_bytes(model)  # after the load's peak RSS is read
    request = SynthesisRequest.of(
        [cfg.text] * cfg.batch_size, max_new_token=cfg.tokens, min_new_token=cfg.tokens,
        voice=Voice(speaker=speaker_from_seed(model, VOICE_SEED)), sampling=Sampling(audio_seed=AUDIO_SEED),
    )

    def run(phase: str, **labels) -> dict:
        gc.collect()  # collect outside the timed region, not inside it
        cpu0 = time.process_time()  # every thread of this process: how much of the cores the call actually got
        sample = _one_call(model, request, cfg.stream, phase)
        sample.update(cpu_s=time.process_time() - cpu0, worker_pid=os.getpid(), **labels)
        samples.append(sample)
        return sample

    run("cold")
    for _ in range(cfg.warmup):
        run("warmup")
    return run


def finish_cell(cfg, samples: list, info: dict) -> dict:
    """The cell's outcome once its timed calls are done: ok, with notes on anything that did not take effect."""
    timed = [s for s in samples if s["phase"] == "timed"]
    info["effective"]["threads"] = timed[-1]["threads"]  # what torch used during the timed calls
    notes = []
    short = sorted({n for s in timed for n in s["tokens"] if n != cfg.tokens})
    if short:
        notes.append(f"some items generated {short} tokens instead of {cfg.tokens}")
    if cfg.compile and not info["effective"].get("compile"):
        notes.append("compile was requested but did not take effect")
    if info["effective"].get("threads") != cfg.threads and cfg.device == "cpu":
        notes.append(f"torch ran {info['effective'].get('threads')} threads, not {cfg.threads}")
    return {"status": "ok", "reason": "; ".join(notes)}


def _apply_budget(cfg: RunConfig, extra: dict) -> None:
    limit = apply_memory_budget(cfg.memory_budget_mb)
    if limit:
        extra["memory_limit_mb"] = limit / 2**20


def _one_call(model, request, stream: bool, phase: str) -> dict:
    from chattts_lab.synthesis import SynthesisOutput, synthesize, synthesize_stream

    if stream:
        out = None
        for item in synthesize_stream(model, request):
            if isinstance(item, SynthesisOutput):
                out = item
    else:
        out = synthesize(model, request)
    m = out.measurements
    return {
        "phase": phase, "wall_s": m.wall_s, "ttfa_s": m.ttfa_s, "decode_s": m.stages.decode_s,
        "prefill_s": m.stages.prefill_s, "stages": m.stages.as_dict(), "gpt_steps": m.gpt_steps,
        "tokens": list(m.tokens), "audio_s": max(m.audio_s, default=0.0), "peak_rss_mb": m.peak_rss_mb,
        "peak_device_mb": m.peak_device_mb, "threads": m.effective.get("threads"),
    }


def serve_cell(cfg: RunConfig, samples: list, info: dict, commands, say: Callable[[dict], None]) -> dict:
    """Stay loaded between passes: one timed call per `repeat` command, the outcome on `finish` (or end of input).

    Each message to the parent is one JSON line after PASS_MARKER: {"ready": ...} once warm, then
    {"sample": ...} per call (timed, or `warmup` when the command says so); the loaded model never leaves
    this process between passes.
    """
    from chattts_lab.trackers.measure import process_peak_rss_mb

    run = prepare_cell(cfg, samples, info)
    say({"ready": True, "pid": os.getpid(), "peak_rss_mb": process_peak_rss_mb()})
    for line in commands:
        command = json.loads(line)
        if command.get("op") != "repeat":
            break
        say({"sample": run(command.get("phase", "timed"), **command.get("labels", {}))})
    if not any(s["phase"] == "timed" for s in samples):  # a worker closed before its turn: its calls were untimed
        return {"status": "ok", "reason": ""}
    return finish_cell(cfg, samples, info)


def run_task(task: dict, commands=(), say: Callable[[dict], None] = lambda message: None) -> dict:
    cfg = RunConfig.from_dict(task["config"])
    samples: list = []
    info: dict = {}
    try:
        with out_of_memory_boundary(f"on {cfg.device} measuring {cfg.label}"):
            if task.get("kind") == "fidelity":
                from chattts_lab.trackers.fidelity import measure_fidelity  # imports torch and ChatTTS: only in the worker

                return {"status": "ok", "reason": "", "fidelity": measure_fidelity(
                    cfg.model, cfg.device, cfg.engine, cfg.precision, cfg.tokens, cfg.threads)}
            if task.get("kind") in ("quality-clips", "quality-score"):
                return {"status": "ok", "reason": "", "quality": _quality_task(task, cfg)}
            if task.get("kind") == "serve":
                outcome = serve_cell(cfg, samples, info, commands, say)
            else:
                outcome = measure_cell(cfg, samples, info)
    except Exception as exc:  # every failure becomes a row: status, reason and traceback, samples kept
        status, reason = classify(exc)
        if status == "oom" and cfg.memory_budget_mb:  # a budget, not the machine, may be what ran out
            reason = f"{reason} (per-cell memory budget {cfg.memory_budget_mb:g} MB)"[:900]
        outcome = {"status": status, "reason": reason, "traceback": traceback.format_exc()}
    return {**outcome, "samples": samples, **info}


def _quality_task(task: dict, cfg: RunConfig) -> dict:
    """Speak the quality clips of one configuration, or score a sweep's clips (chattts_lab.quality.sweep)."""
    from chattts_lab.quality import sweep as quality  # torch, ChatTTS and the quality models: only in the worker

    if task["kind"] == "quality-clips":
        return quality.make_clips(cfg, task["folder"], task["synthetic_tokens"])
    return quality.score_sweep(task["made"], task["reference_of"])


def die_with_parent() -> None:
    """Linux: be killed when the sweep that started us dies (no orphaned workers after a SIGKILL)."""
    parent = os.environ.get("CHATTTS_LAB_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # the parent died before the line above took effect
        sys.exit(3)


def main() -> int:
    die_with_parent()
    logging.basicConfig(level=os.environ.get("CHATTTS_LAB_LOG", "WARNING"), stream=sys.stderr)
    task = json.loads(sys.stdin.readline())  # the task is the first line; a `serve` task's commands follow

    def say(message: dict) -> None:
        sys.stdout.write("\n" + PASS_MARKER + json.dumps(message, default=str) + "\n")
        sys.stdout.flush()

    payload = torch_thread.run(run_task, task, sys.stdin, say)  # all of it on one thread: one OpenMP pool
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
