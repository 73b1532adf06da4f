"""synthesize(model, request) -> audio plus honest measurements of how it was made.

Every engine runs through ChatTTS's own `Chat.infer` (lab and onnx swap only the token generator); an engine that
streams by itself (`EngineRuntime.streams_incrementally`) streams with its own loop over ChatTTS's parts. Either way
text normalisation, prompts, speaker handling, the decoder and the vocoder are ChatTTS's own.
"""

from __future__ import annotations

import logging
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from chattts_lab import metrics
from chattts_lab.limits import out_of_memory_boundary
from chattts_lab.trackers.measure import PeakMemory, Stopwatch
from chattts_lab.models import LoadedModel, set_threads
from chattts_lab.requests import REQUEST_LEVEL, InvalidRequest, SynthesisRequest, decode_speaker, validate_request
from chattts_lab.torch_thread import on_torch_thread, relay
from chattts_lab.trackers.stages import StageRecorder, StageTimes

log = logging.getLogger(__name__)
SAMPLE_RATE = metrics.SAMPLE_RATE
SYNTHETIC_WARNING = "Synthetic (random) weights: the timings are real, the audio is noise."


@dataclass
class Measurements:
    wall_s: float
    stages: StageTimes
    tokens: list[int]  # audio tokens generated per text
    gpt_steps: int  # GPT forward passes for the audio tokens (prefill included)
    audio_s: list[float]  # seconds of audio per text
    peak_rss_mb: float
    peak_device_mb: float | None
    effective: dict  # device, dtype per submodule, threads, compile: what actually took effect
    ttfa_s: float | None = None  # time to first audio, when streamed
    interrupted: bool = False  # the audio ends where a stop was asked, not at its end of speech or token limit
    interrupted_reason: str | None = None  # who asked (interrupted results only)
    queue_wait_s: float = 0.0  # waiting for the model before this call began (served requests)
    batch_requests: int = 1  # requests served together in this one batched generation
    scheduling: str = REQUEST_LEVEL  # served requests: one of requests.SCHEDULINGS

    @property
    def rtf(self) -> float | None:
        return metrics.rtf(self.wall_s, max(self.audio_s, default=0.0))

    @property
    def x_realtime(self) -> float | None:
        return metrics.x_realtime(self.wall_s, max(self.audio_s, default=0.0))

    @property
    def audio_s_per_s(self) -> float | None:
        return metrics.audio_s_per_s(sum(self.audio_s), self.wall_s)

    @property
    def gpt_steps_per_s(self) -> float | None:
        return metrics.tokens_per_s(self.gpt_steps, self.stages.prefill_s + self.stages.decode_s)

    @property
    def step_ms(self) -> float | None:
        return metrics.step_ms(self.stages.decode_s, self.gpt_steps - 1)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "stages"}
        out["stages"] = self.stages.as_dict()
        for name in ("rtf", "x_realtime", "audio_s_per_s", "gpt_steps_per_s", "step_ms"):
            out[name] = getattr(self, name)
        return out


@dataclass
class SynthesisOutput:
    audio: list[np.ndarray]  # float32 mono at SAMPLE_RATE, one per text
    measurements: Measurements
    synthetic: bool
    sample_rate: int = SAMPLE_RATE
    texts: tuple[str, ...] = ()

    @property
    def warning(self) -> str | None:
        return SYNTHETIC_WARNING if self.synthetic else None


@dataclass
class StreamChunk:
    audio: list[np.ndarray]  # the new samples of each text since the last chunk
    elapsed_s: float  # since the call started
    index: int
    synthetic: bool = False  # made by random weights: the timing is real, the audio is noise
    queue_wait_s: float = 0.0  # served requests: waiting for the model before this batch began
    batch_requests: int = 1  # served requests: requests sharing this batched generation
    scheduling: str = REQUEST_LEVEL  # served requests: one of requests.SCHEDULINGS (see Measurements)


STOPPED_BY_CALLER = "its caller asked it to stop"  # a stop event: Interrupt, or a listener who hung up
INTERRUPT_CALLED = "interrupt(model) was called"


class CallStop:
    """One call's own stop flag, in the shape ChatTTS's generators read (`GPT.Context`: `get`, `set`).

    ChatTTS keeps one flag per model (`Chat.context`, set by `Chat.interrupt`) and clears it only when its own
    `infer` starts, so a stop asked during a call that does not go through `infer` (the lab's streaming loop) stayed
    set and cut every later call short after one step. Each call installs a fresh CallStop for its length, under the
    model's lock: a stop reaches only the call it was asked of, and nothing is left set for the next."""

    def __init__(self):
        self._set, self.reason = False, None

    def set(self, flag: bool) -> None:
        """ChatTTS's own use: `Chat.interrupt()` sets it (chattts_lab.interrupt). `infer` clears it as it starts, to
        forget an earlier call's stop; a CallStop is new for each call, so the only stop it could forget is one asked
        of this call before `infer` began: clearing is ignored."""
        if flag:
            self.stop(INTERRUPT_CALLED)

    def get(self) -> bool:
        return self._set

    def stop(self, reason: str) -> None:
        """The lab's own use: end the call at its next step, saying why (the first reason given is kept)."""
        self.reason = self.reason or reason
        self._set = True


@contextmanager
def own_stop(model: LoadedModel) -> Iterator[CallStop]:
    """For the length of one call (the model's lock held), ChatTTS's stop flag is this call's own."""
    chat = model.chat
    saved, chat.context = chat.context, CallStop()
    try:
        yield chat.context
    finally:
        chat.context = saved


@dataclass
class _Call:
    """State of one synthesis call while it runs."""

    model: LoadedModel
    request: SynthesisRequest
    recorder: StageRecorder
    memory: PeakMemory
    stop: CallStop
    t0: float = 0.0
    ttfa_s: float | None = None


@on_torch_thread
def synthesize(model: LoadedModel, request: SynthesisRequest, threads: int | None = None,
               stop: threading.Event | None = None, checked: bool = False,
               row_speakers: tuple[str, ...] | None = None) -> SynthesisOutput:
    """Synthesize every text of the request in one batch and measure it.

    `threads` overrides the model's thread count for this call (None keeps it). Setting `stop` (from any
    thread, even before the call begins) ends the generation after the current GPT step, keeping what it has.
    `checked`: the caller validated the request in parts (requests merged into one batch may together
    exceed the limits of one request). `row_speakers`: one speaker string per text, for requests with different
    voices merged into one batch (the request's own voice is then unused).
    """
    request = request if checked else validate_request(request)
    with model.lock, memory_errors_of(model, request), _speakers_per_row(model, row_speakers), own_stop(model) as own:
        call = _begin(model, request, threads, stop, own)
        with call.recorder.attached(model.chat, model.engine), call.memory:
            call.t0 = call.recorder.clock.now()
            _infer(model, request, stream=False)
            wall = call.recorder.clock.now() - call.t0
        return _finish(call, wall)


def synthesize_stream(
    model: LoadedModel, request: SynthesisRequest, threads: int | None = None, stop: threading.Event | None = None,
    checked: bool = False, row_speakers: tuple[str, ...] | None = None,
) -> Iterator[StreamChunk | SynthesisOutput]:
    """Yield StreamChunk as audio arrives, then one final SynthesisOutput with the whole audio (`stop`,
    `checked` and `row_speakers` as in synthesize). The generation runs on the torch thread."""
    return relay(_synthesize_stream, model, request, threads, stop, checked, row_speakers)


def _synthesize_stream(model: LoadedModel, request: SynthesisRequest, threads: int | None,
                       stop: threading.Event | None, checked: bool, row_speakers: tuple[str, ...] | None):
    request = request if checked else validate_request(request)
    with model.lock, memory_errors_of(model, request), _speakers_per_row(model, row_speakers), own_stop(model) as own:
        call = _begin(model, request, threads, stop, own)
        index = 0
        with call.recorder.attached(model.chat, model.engine), call.memory:
            call.t0 = call.recorder.clock.now()
            for wavs in _infer(model, request, stream=True):
                wavs = np.asarray(wavs)
                if wavs.size == 0 or wavs.shape[-1] == 0:
                    continue
                elapsed = call.recorder.clock.now() - call.t0
                call.ttfa_s = elapsed if call.ttfa_s is None else call.ttfa_s
                yield StreamChunk([w.astype(np.float32) for w in wavs], elapsed, index, model.synthetic)
                index += 1
            wall = call.recorder.clock.now() - call.t0
        yield _finish(call, wall)


def interrupt(model: LoadedModel) -> None:
    """Ask the synthesis running on `model` now to stop after the current GPT step; it returns what it has, marked
    interrupted. With none running it does nothing: a call that starts later is not affected (each call has its own
    stop flag, CallStop), nor is ChatTTS's own flag, which code that calls ChatTTS directly still reads."""
    running = model.chat.context
    if isinstance(running, CallStop):
        running.stop(INTERRUPT_CALLED)


WARM_UP_TEXTS = ("Warm up, please!", "预热一下！", "Mixed 中英 text [uv_break] here!")


def warm_up(model: LoadedModel) -> None:
    """Pay one-time costs outside any measurement: the normaliser's numba JIT for English, for Chinese
    and for its invalid-character path (several seconds each on first use), and the first kernels."""
    synthesize(model, SynthesisRequest.of(WARM_UP_TEXTS, max_new_token=4, min_new_token=4))


def memory_errors_of(model: LoadedModel, request: SynthesisRequest):
    """Out of memory becomes OutOfMemory naming the request's size (the model and a server stay usable)."""
    return memory_errors_explained(
        f"on {model.device} synthesizing {len(request.texts)} text(s) of up to {request.max_new_token} tokens")


def memory_errors_explained(doing: str):
    """The out-of-memory boundary of synthesis, whoever runs it (one call, or the continuous-batching loop)."""
    return out_of_memory_boundary(
        doing, "the model stays loaded and the server is still up: use a smaller batch, fewer or shorter texts, "
               "fewer audio tokens or a lower precision")


def _begin(model: LoadedModel, request: SynthesisRequest, threads: int | None, stop: threading.Event | None,
           own: CallStop) -> _Call:
    threads = set_threads(threads if threads is not None else model.config.threads)
    model.effective["threads"] = threads
    model.effective.update(model.engine.use_threads(threads))  # engines that fix threads themselves follow
    recorder = StageRecorder(Stopwatch(model.device))
    if stop is not None:
        # Checked at every GPT step: a stop event set at any moment, before the call too, ends it at the next step.
        recorder.on_step = lambda: stop.is_set() and own.stop(STOPPED_BY_CALLER)
    return _Call(model, request, recorder, PeakMemory(model.device), own)


def _infer(model: LoadedModel, request: SynthesisRequest, stream: bool):
    chat = model.chat
    params_code, params_refine = chattts_params(model, request)
    if stream and model.engine.streams_incrementally:  # new frames only, first chunk early (the lab's loop)
        return model.engine.stream(chat, list(request.texts), params_refine, params_code,
                                   skip_refine_text=not request.refine.enabled,
                                   do_text_normalization=request.normalize_text)
    result = chat.infer(
        list(request.texts),
        stream=stream,
        skip_refine_text=not request.refine.enabled,
        do_text_normalization=request.normalize_text,
        split_text=False,  # batches as given: stock's split adds a hidden reference generation
        params_refine_text=params_refine,
        params_infer_code=params_code,
    )
    return result


@contextmanager
def _speakers_per_row(model: LoadedModel, speakers: tuple[str, ...] | None):
    """ChatTTS puts one speaker embedding into every row of a batch; for the length of one call, put each row's
    own instead (the rows are the texts, in order). Only while the model's lock is held, so no other call sees it."""
    if speakers is None:
        yield
        return
    rows = F.normalize(torch.from_numpy(np.stack([decode_speaker(s) for s in speakers])).float(), p=2.0, dim=1)

    @torch.inference_mode()  # as ChatTTS's own apply: the embeddings are inference tensors
    def apply(emb, spk_emb, input_ids, spk_emb_ids, device, inplace=True):
        n = rows.to(device=emb.device, dtype=emb.dtype).unsqueeze(1).expand(emb.shape)
        at_speaker = input_ids.narrow(-1, 0, 1).eq(spk_emb_ids).expand(emb.shape)
        return torch.where(at_speaker, n, emb, out=emb if inplace else None)

    model.chat.speaker.apply = apply  # an instance attribute over the class's method...
    try:
        yield
    finally:
        del model.chat.speaker.apply  # ...and deleting it restores the method


def chattts_params(model: LoadedModel, request: SynthesisRequest):
    """ChatTTS's (InferCodeParams, RefineTextParams) for one request on this model."""
    import ChatTTS

    s, v = request.sampling, request.voice
    speaker = v.speaker
    if v.seed is not None:
        speaker = speaker_from_seed(model, v.seed)
    code = ChatTTS.Chat.InferCodeParams(
        prompt=f"[speed_{request.speed}]",
        spk_emb=speaker,
        spk_smp=v.sample_audio_code,
        txt_smp=v.sample_text if v.sample_audio_code else None,
        temperature=s.temperature,
        top_P=s.top_p,
        top_K=s.top_k,
        max_new_token=request.max_new_token,
        min_new_token=request.min_new_token,
        manual_seed=s.audio_seed,
        show_tqdm=False,
    )
    refine = ChatTTS.Chat.RefineTextParams(
        prompt=request.refine.prompt,
        max_new_token=request.refine.max_new_token,
        top_P=s.top_p,
        top_K=s.top_k,
        manual_seed=s.text_seed,
        show_tqdm=False,
    )
    return code, refine


SPEAKERS_KEPT = 256  # speaker strings remembered per model (about 860 bytes each)
_speakers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # chat -> {seed: speaker string}, newest last


@on_torch_thread
def speaker_from_seed(model: LoadedModel, seed: int) -> str:
    """The speaker string ChatTTS draws for a seed (as the official demo does with its audio seed). Remembered per
    model: drawing and encoding one took 40 ms, which every request with a named voice paid before its prefill (15 %
    of a lone listener's first audio, lab int8 on 2 cores)."""
    kept = _speakers.setdefault(model.chat, {})
    if seed not in kept:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            kept[seed] = model.chat.sample_random_speaker()
        if len(kept) > SPEAKERS_KEPT:
            del kept[next(iter(kept))]
    return kept[seed]


@on_torch_thread
def encode_sample_audio(model: LoadedModel, wav: np.ndarray, sample_rate: int) -> str:
    """Turn a voice clip into ChatTTS's sample-audio code (resampled to 24 kHz, mono)."""
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim == 2:
        wav = wav.mean(axis=1 if wav.shape[1] <= 8 else 0)
    if wav.size < sample_rate // 4:
        raise InvalidRequest("the sample clip is shorter than a quarter of a second")
    if not np.isfinite(wav).all():
        raise InvalidRequest("the sample clip holds invalid (NaN or infinite) samples")
    if sample_rate != SAMPLE_RATE:
        import torchaudio.functional as AF

        wav = AF.resample(torch.from_numpy(wav), sample_rate, SAMPLE_RATE).numpy()
    with model.lock:
        return model.chat.sample_audio_speaker(wav)


def _finish(call: _Call, wall: float) -> SynthesisOutput:
    model, rec = call.model, call.recorder
    lengths, audio = _final_audio(rec, len(call.request.texts))
    measurements = Measurements(
        wall_s=wall,
        stages=rec.finish(wall),
        tokens=lengths,
        gpt_steps=rec.forward_calls or max(lengths, default=0),
        audio_s=[len(a) / SAMPLE_RATE for a in audio],
        peak_rss_mb=call.memory.peaks.rss_mb,
        peak_device_mb=call.memory.peaks.device_mb,
        effective=dict(model.effective),
        ttfa_s=call.ttfa_s,
        interrupted=call.stop.get(),
        interrupted_reason=call.stop.reason if call.stop.get() else None,
    )
    return SynthesisOutput(audio, measurements, model.synthetic, texts=call.request.texts)


def _final_audio(rec: StageRecorder, n_texts: int) -> tuple[list[int], list[np.ndarray]]:
    """Per-text audio from the last decode (which covers the whole output), cut to each text's length.

    Stock `infer` strips near-silent samples from its return value; the decoder's output is kept here
    instead, so the length is exactly (2N-1)*256 samples for N tokens.
    """
    if not rec.decoded:
        return [0] * n_texts, [np.zeros(0, dtype=np.float32) for _ in range(n_texts)]
    lengths, wavs = rec.decoded[-1]
    audio = [wavs[i, : metrics.samples_for_tokens(n)].astype(np.float32) for i, n in enumerate(lengths)]
    return lengths, audio
