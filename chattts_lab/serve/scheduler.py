"""Continuous batching for a server: each request's texts join the running generation at the next GPT step.

Request-level batching (`batcher.py`) runs a batch from start to end, so a request that arrives meanwhile waits for
the whole batch. Here one thread owns the engine's row decoder (`EngineRuntime.row_decoder`: a fixed number of
KV-cache rows, chattts_lab/engines/base.py's `RowDecoder`) and steps it: between two steps it admits what has
arrived into free rows (prefilled alone, in its own rows; while others generate, a slice of one prompt per step:
PREFILL_SLICE), and a row that ends (its EOS, its token limit, its caller's stop or hang-up) leaves at once and
frees its row for the next. Every row streams on its own and samples
with its own request's settings (temperature, top-P/top-K, seed, token limits, voice), so different settings no
longer split requests into separate batches.

Bounded: at most `max_rows` rows generate at once (the KV-cache budget) and at most `max_queue` requests wait
for a row, counted as they arrive (a request waits unless a free row is there for it); beyond that `submit` refuses
at once with `Overloaded` (and a Retry-After estimate) rather than let waiting grow without limit. Only an engine
whose runtime gives a row decoder can admit rows (the lab's decode loop: lab, onnx); the others keep request-level
batching (`Engine.continuous_batching_reason` says why), and every result says which scheduling ran
(`Measurements.scheduling`). Nothing here knows an engine's internals: it asks the runtime and its decoder.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Callable

import numpy as np

from chattts_lab import engines, torch_thread
from chattts_lab.serve.batch import Part
from chattts_lab.serve.jobs import Job, job_output
from chattts_lab.serve.loop_trace import LoopTrace
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.streaming import LoopPace, ahead_s, due_spans, first_chunks
from chattts_lab.engines.base import RowDecoder
from chattts_lab.metrics import SAMPLES_PER_TOKEN
from chattts_lab.models import LoadedModel, set_threads
from chattts_lab.requests import CONTINUOUS
from chattts_lab.synthesis import (SAMPLE_RATE, StreamChunk, chattts_params, memory_errors_explained, memory_errors_of,
                                   own_stop)

log = logging.getLogger(__name__)
# Prompt positions a newcomer prefills per loop iteration while other rows generate (chunked prefill): every running
# row waits for that slice before its next step. A forward reads every weight once whatever its positions, so a
# slice's cost is a fixed part (about a step's) plus a part per position; 16 keep a slice near two steps of 4 rows
# (full-size int8, 2 threads: docs/measurements/2026-12-04-capacity-trace.md) where a whole prompt of 40-80
# positions held them 3-6 steps, and a prompt of 17-46 positions still joins within 1-3 iterations.
PREFILL_SLICE = 16


def slice_positions(left: int) -> int:
    """A newcomer's next slice while rows generate, `left` positions to go: PREFILL_SLICE, or all where less than half
    a slice would remain. A slice costs a fixed part (about a step) whatever its positions, so a short tail cost nearly
    a slice and one more iteration (docs/measurements/2026-12-05-newcomer-first.md)."""
    return left if left < PREFILL_SLICE * 3 // 2 else PREFILL_SLICE


class Overloaded(Exception):
    """Every row is busy and the queue is full: try again after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def row_decoder_of(model: LoadedModel, max_rows: int) -> RowDecoder:
    """The loaded model's row decoder for `max_rows` rows, kept with the model (its KV cache lives as long as the
    model and is reused by each busy spell), emptied; RuntimeError where its engine cannot admit rows."""
    decoder = getattr(model, "_row_decoder", None)
    if decoder is None or decoder.rows != max_rows:
        decoder = model.engine.row_decoder(model.chat, max_rows)
        if decoder is None:
            raise RuntimeError(f"continuous batching cannot run on the {model.engine.name} engine: "
                               f"{engines.get(model.engine.name).continuous_batching_reason}")
        model._row_decoder = decoder
    decoder.reset()
    return decoder


class ContinuousScheduler:
    """`submit(part)` -> a Future of the part's SynthesisOutput; the torch thread generates every admitted row.

    `load()` gives the model (called on the torch thread, inside `hold()`); `hold()` is held while any row generates,
    so that other model work (a sweep) waits for it, and it for them."""

    def __init__(self, load: Callable[[], LoadedModel], policy: SchedulerPolicy = SchedulerPolicy(),
                 hold: Callable[[], AbstractContextManager] = nullcontext):
        self.load, self.policy, self.hold = load, policy, hold
        self._arrivals: queue.Queue[Job] = queue.Queue()
        self._waiting: list[Job] = []  # arrived, not yet (fully) admitted: the loop thread's and its busy spells' own
        self._lock = threading.Lock()
        self._queued = 0  # requests submitted and not yet admitted (any thread reads it)
        self._busy_rows = 0
        self._mean_request_s = 5.0  # for Retry-After, updated as requests finish
        self._live_rows: list = []  # the decoder's rows, for failing their callers when a step fails
        self._thread: threading.Thread | None = None
        self._pace = LoopPace()  # the busy spell's latest loop iterations: how little audio ahead makes a row send now
        self._decoder: RowDecoder | None = None  # the busy spell's (the loop thread's own)
        self._admitting = False  # the loop iteration's: it prefilled or sent a first chunk
        self._trace = LoopTrace.from_env()  # off unless $CHATTTS_LAB_LOOP_TRACE names a file

    # ---- any thread

    def submit(self, part: Part) -> Future:
        with self._lock:
            # Counted at arrival: a request not yet admitted waits unless a free row is there for it, so a burst
            # that lands before the loop admits anyone is bounded too (max_rows + max_queue at once, not all of it).
            full = self._queued >= self.policy.max_queue + max(0, self.policy.max_rows - self._busy_rows)
            if full and not part.continues:
                raise Overloaded(f"the server is at capacity: {self._busy_rows} of {self.policy.max_rows} rows busy "
                                 f"and {self._queued} requests waiting", self.retry_after_s())
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="continuous-batching", daemon=True)
                self._thread.start()
        job = Job(part, Future(), texts=list(enumerate(part.request.texts)))
        self._arrivals.put(job)
        return job.future

    def retry_after_s(self) -> int:
        """Seconds until a row is likely free: the queue ahead, served max_rows at a time."""
        ahead = self._queued / self.policy.max_rows + 1
        return max(1, math.ceil(self._mean_request_s * ahead))

    def status(self) -> tuple[int, int, int]:
        """(requests waiting for a row, rows generating, rows in all)."""
        return self._queued, self._busy_rows, self.policy.max_rows

    # ---- the loop thread (it waits for arrivals; its busy spells run on the torch thread)

    def _serve(self) -> None:
        while True:
            self._waiting.append(self._arrivals.get())  # idle until something arrives
            try:
                with self.hold():
                    torch_thread.run(self._busy_spell)
            except Exception as exc:  # the model would not load, or a step failed: every caller hears why
                log.exception("continuous batching: generation failed")
                for job in self._waiting:
                    if job.admitted is None:
                        self._dequeued(job)
                for job in dict.fromkeys(self._waiting + [r.owner for r in self._live_rows]):
                    self._fail(job, exc)
                self._waiting, self._live_rows = [], []
                with self._lock:
                    self._busy_rows = 0

    def _busy_spell(self) -> None:
        """Load, then generate until no row is busy and nothing waits: on the torch thread, with every other call
        that runs the model (one OpenMP pool: chattts_lab.torch_thread)."""
        model = self.load()
        set_threads(model.config.threads)
        # own_stop: a refine pass reads ChatTTS's stop flag, so the loop has its own too (rows stop by `part.stop`)
        with model.lock, memory_errors_explained(f"on {model.device} generating up to "
                                                 f"{self.policy.max_rows} rows at once"), own_stop(model):
            self._run_while_busy(model)

    def _run_while_busy(self, model: LoadedModel) -> None:
        decoder = self._decoder = row_decoder_of(model, self.policy.max_rows)
        # A new busy spell starts with no rows: the pace of the last one (other rows, other load) says nothing of it.
        # Kept, the mean of a spell of eight rows behind real time would hold the next spell's first listeners to full
        # chunks (LoopPace.low_water_s), and their second chunk would come late.
        self._pace = LoopPace()
        while True:
            began = time.perf_counter()  # an iteration: what every running row waits for between two steps
            waited = bool(decoder.active)  # (an iteration into an idle loop, which prefills whole prompts, is no pace)
            self._admitting = False  # whether this iteration works for a newcomer (LoopPace.took)
            self._collect_arrivals()
            self._stop_asked(model, decoder)  # first: a row being prefilled for a caller gone is not filled further
            self._admit(model, decoder)
            if not decoder.active:
                if not self._waiting and self._arrivals.empty():
                    return  # idle: release the model (and `hold`) until the next request
                continue
            with self._trace.timed("step", rows=len(decoder.active)):
                ended = decoder.step()
            self._after_step(model, decoder, ended)
            if waited:
                self._pace.took(time.perf_counter() - began, self._admitting)

    def _collect_arrivals(self) -> None:
        while True:
            try:
                self._waiting.append(self._arrivals.get_nowait())
            except queue.Empty:
                return

    def _admit(self, model: LoadedModel, decoder: RowDecoder) -> None:
        """Fill free rows from the oldest waiting requests, text by text (a request's texts may start apart). While
        rows generate, one prefill slice per iteration (slice_positions): the running rows wait for it before
        their next step, so a newcomer's prompt comes in slices between steps (chunked prefill) and newcomers that
        arrive together take turns. Into an idle loop (no one waits), every prompt is prefilled whole at once."""
        generating, admitted = bool(decoder.active), 0
        if decoder.filling is not None:
            self._fill(model, decoder, decoder.filling, generating)
            if generating:
                return self._rows_changed(decoder)
        while decoder.free and self._waiting and not (generating and admitted):
            job = self._waiting[0]
            if job.part.stop.is_set():  # asked to stop before (all of) it started
                self._waiting.pop(0)
                if job.admitted is None:
                    self._dequeued(job)
                job.texts.clear()
                self._release_job(decoder, job)
                self._finish(model, job)
                continue
            index, text = job.texts.pop(0)
            admitted += 1
            if not job.texts:
                self._waiting.pop(0)
            self._begin_text(model, decoder, job, index, text, generating)
        self._rows_changed(decoder)
        for row in decoder.active:
            row.owner.shared_with = max(row.owner.shared_with, len(decoder.active))

    def _begin_text(self, model: LoadedModel, decoder: RowDecoder, job: Job, index: int, text: str,
                    generating: bool) -> None:
        """Build the text's prompt, take a row for it and prefill its first slice (or all of it)."""
        if job.admitted is None:
            job.admitted = time.perf_counter()
            job.part.queue_wait_s = job.admitted - job.enqueued
            self._dequeued(job, takes_row=True)
            if job.part.on_start is not None:
                job.part.on_start()
        try:
            with memory_errors_of(model, job.part.request):
                params_code, params_refine = chattts_params(model, job.part.request)
                with self._trace.timed("prompt"):
                    prompt = decoder.prompt(text, params_refine, params_code, job.part.request.refine.enabled,
                                            job.part.request.normalize_text)
                row = decoder.begin(prompt, owner=job)
        except Exception as exc:  # this request's prompt could not be built or held: it alone fails
            return self._drop(decoder, job, exc)
        row.meta["index"] = index
        job.rows[index] = row
        self._fill(model, decoder, row, generating)

    def _fill(self, model: LoadedModel, decoder: RowDecoder, row, generating: bool) -> None:
        """Prefill the row's next slice while rows generate (they wait for it), else the rest of its prompt. Once
        it is all in, the row generates with the others (and may have ended at its first token)."""
        job, start, began = row.owner, row.prefilled, time.perf_counter()
        self._admitting = True
        try:
            with memory_errors_of(model, job.part.request):
                done = decoder.fill(row, slice_positions(row.prompt.length - row.prefilled) if generating else None)
        except Exception as exc:  # (the cache for its prompt did not fit) it alone fails
            return self._drop(decoder, job, exc)
        whole = start == 0 and done
        self._trace.record("prefill" if whole else "slice", began, row=self._trace.row_number(row.meta),
                           prompt=row.prompt.length, rows=len(decoder.active),
                           **({} if whole else dict(start=start, positions=row.prefilled - start, last=done)))
        if done:
            self._stream(model, decoder, [row])
            if row.ended:
                self._leave(model, decoder, [row])

    def _dequeued(self, job: Job, takes_row: bool = False) -> None:
        """The job no longer waits. One admitted takes a row in the same count, so that submit never sees it in
        neither (which would admit one request beyond the bound); _rows_changed then counts the rows exactly."""
        with self._lock:
            self._queued -= 1
            self._busy_rows += takes_row

    def _stop_asked(self, model: LoadedModel, decoder: RowDecoder) -> None:
        """Rows of requests whose caller asked to stop (Interrupt, a hang-up) end now and free their rows; waiting
        requests whose caller went away leave the queue."""
        for job in [j for j in self._waiting if j.part.stop.is_set() and j.admitted is None]:
            self._waiting.remove(job)
            self._dequeued(job)
            self._finish(model, job)
        stopped = [row for row in self._rows_held(decoder) if row.owner.part.stop.is_set()]
        for row in stopped:
            row.ended = row.ended or "stopped"
        self._stream(model, decoder, stopped)  # what they held back: every token made so far
        self._leave(model, decoder, stopped)

    def _leave(self, model: LoadedModel, decoder: RowDecoder, rows: list) -> None:
        """Free the rows, say so, then answer the requests they finish (a caller that hears its answer can count
        on its row being free)."""
        for row in rows:
            decoder.release(row)
        self._rows_changed(decoder)
        for job in dict.fromkeys(row.owner for row in rows):
            self._maybe_finish(model, job)

    def _rows_changed(self, decoder: RowDecoder) -> None:
        """Publish which rows are taken (submit reads the count from other threads to refuse or accept)."""
        self._live_rows = self._rows_held(decoder)
        with self._lock:
            self._busy_rows = len(self._live_rows)

    @staticmethod
    def _rows_held(decoder: RowDecoder) -> list:
        """The rows generating and the one being prefilled: each holds a cache row."""
        return list(decoder.active) + ([decoder.filling] if decoder.filling is not None else [])

    def _after_step(self, model: LoadedModel, decoder: RowDecoder, ended: list) -> None:
        self._stream(model, decoder, list(decoder.active))
        self._leave(model, decoder, ended)

    # ---- audio

    def _stream(self, model: LoadedModel, decoder: RowDecoder, rows: list) -> None:
        """Send each streamed row's next chunk when it is due, and the rest at its end, in one decoder call that takes
        the other active rows' waiting tokens too (streaming.due_spans): the decoder's streaming spans (new frames
        with context before them, its last `hold` tokens kept back)."""
        spans, joined = due_spans(rows, decoder.active, self._pace.low_water_s(), decoder.hold)
        if not spans:
            return
        t0 = time.perf_counter()
        first = first_chunks(spans)
        self._admitting |= bool(first)  # a newcomer's first audio
        chunks = decoder.decode_spans(spans)
        self._trace.record("decode", t0, rows=len(spans), tokens=[(b - a) // SAMPLES_PER_TOKEN for _, a, b in spans],
                           first=first, joined=joined,
                           each=[self._trace.row_number(row.meta) for row, _, _ in spans])
        share = (time.perf_counter() - t0) / len(spans)  # the rows' chunks decode together: each bears its share
        for (row, _, upto), audio in zip(spans, chunks):
            row.owner.decode_s += share
            row.meta["sent"] = upto
            self._send(model, row.owner, row.meta["index"], row, audio)

    def _send(self, model: LoadedModel, job: Job, index: int, row, audio: np.ndarray) -> None:
        """Hand one chunk to the row's caller."""
        if self._trace.enabled:  # ahead before this chunk: `sent` already counts it
            ahead = ahead_s(row.meta)
            self._trace.record("chunk", time.perf_counter(), row=self._trace.row_number(row.meta),
                               tokens=len(audio) // SAMPLES_PER_TOKEN,
                               ahead_s=None if ahead is None else ahead - len(audio) / SAMPLE_RATE,
                               since_admit_s=time.perf_counter() - job.admitted)
        row.meta.setdefault("first_sent_at", time.perf_counter())
        job.audio.setdefault(index, []).append(audio)
        elapsed = time.perf_counter() - job.admitted
        job.first_audio_s = elapsed if job.first_audio_s is None else job.first_audio_s
        texts = [np.zeros(0, np.float32)] * len(job.part.request.texts)
        texts[index] = audio
        chunk = StreamChunk(texts, elapsed, job.chunks, model.synthetic, job.part.queue_wait_s, job.shared_with)
        job.chunks += 1
        try:
            job.part.on_chunk(replace(chunk, scheduling=CONTINUOUS))
        except Exception:  # the caller's own failure (a closed queue): its row carries on until it is stopped
            log.exception("continuous batching: a chunk could not be handed over")

    def _whole_audio(self, job: Job, row) -> np.ndarray:
        t0 = time.perf_counter()
        audio = self._decoder.audio(row)
        job.decode_s += time.perf_counter() - t0
        return audio

    # ---- results

    def _maybe_finish(self, model: LoadedModel, job: Job) -> None:
        if job.done() or (job.part.stop.is_set() and not any(r.ended is None for r in job.rows.values())):
            if job.part.stop.is_set():
                job.texts.clear()
                if job in self._waiting:
                    self._waiting.remove(job)
            self._finish(model, job)

    def _finish(self, model: LoadedModel, job: Job) -> None:
        if job.future.done():
            return
        texts = job.part.request.texts
        audio = []
        for i in range(len(texts)):
            row = job.rows.get(i)
            if row is None:
                audio.append(np.zeros(0, np.float32))
            elif job.stream:
                audio.append(np.concatenate(job.audio.get(i, [])) if job.audio.get(i) else np.zeros(0, np.float32))
            else:
                audio.append(self._whole_audio(job, row))
        output = job_output(model, job, audio, self.policy.max_rows)
        self._trace.flush()  # (when on) before the caller hears its answer: the trace holds the request whole
        job.future.set_result(output)
        wall = time.perf_counter() - (job.admitted or job.enqueued)
        self._mean_request_s = 0.8 * self._mean_request_s + 0.2 * wall

    def _release_job(self, decoder: RowDecoder, job: Job) -> None:
        for row in job.rows.values():
            if row in self._rows_held(decoder):
                decoder.release(row)

    def _drop(self, decoder: RowDecoder, job: Job, exc: Exception) -> None:
        """The request alone fails: its rows are freed and its caller hears why."""
        if job in self._waiting:
            self._waiting.remove(job)
        self._release_job(decoder, job)
        self._rows_changed(decoder)
        self._fail(job, exc)

    def _fail(self, job: Job, exc: Exception) -> None:
        if not job.future.done():
            job.future.set_exception(exc)
