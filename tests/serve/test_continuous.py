"""Continuous batching on tiny synthetic weights: rows that join a running generation compute what they compute
alone, and faults inside a running batch end only their own row. The rows' own tests run on both engines whose decode
loop admits rows: lab fp32, and onnx fp32, int8 and int4 (its ONNX Runtime session as the lab loop's forward pass, the
same row code on its KV cache).

No clocks: every "during" is an event (a row's first chunk, a step count), never a sleep.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from chattts_lab.serve.batch import Part
from chattts_lab.engines.lab.continuous import RowDecoder, capture_prompt
from chattts_lab.metrics import samples_for_tokens
from chattts_lab import engines, models
from chattts_lab.models import LoadConfig, load_model
from chattts_lab.requests import Sampling, SynthesisRequest, Voice
from chattts_lab.serve.policy import SchedulerPolicy
from chattts_lab.serve.scheduler import ContinuousScheduler, Overloaded, row_decoder_of
from chattts_lab.synthesis import chattts_params

from tests.conftest import TINY

TEXTS = ("Hello there, this is a test.", "A second text, longer than the first one by a little bit more.", "第三个句子。")


# (engine, precision) of the models whose rows join and leave a running generation here
ROW_ENGINES = [("lab", "fp32"), ("onnx", "fp32"), ("onnx", "int8"), ("onnx", "int4")]
FLOAT_ROWS = [e for e in ROW_ENGINES if not engines.PRECISION[e[1]].quantized]
# How far a row's hidden states may stray from its text's generated alone while its tokens are the same (relative,
# per token). Float weights and activations: float rounding, so the sampled tokens are the same too. Quantized
# activations: a rounding that lands on the other side of a quantization level moves the state by about that level,
# after which a draw near a boundary may pick another token. Measured on these rows: int4 (activations quantized per
# row) up to 9e-4, onnx int8 (one scale for the whole batch, so a row's rounding depends on the others) up to 5.6e-3;
# with the rows behind never given their own keys/values (a broken _copy_behind) 1.1e-2 to 3.8e-2.
STRAY = {"fp32": 1e-5, "int4": 4e-3, "int8": 1.5e-2}


@pytest.fixture(scope="module", autouse=True)
def models_side_by_side():
    """Every model of this file stays loaded (a process keeps one by default: loading another unloads it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "MAX_CACHED", len(ROW_ENGINES) + 1)
        yield
    models.unload_all()


@pytest.fixture(scope="module")
def model():
    return load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1))


@pytest.fixture(scope="module", params=ROW_ENGINES, ids="-".join)
def row_model(request):
    engine, precision = request.param
    return load_model(LoadConfig(model=TINY, precision=precision, engine=engine, threads=1))


def request(i: int, tokens: int, **changes) -> SynthesisRequest:
    """Request i: its own seed, temperature, top-K and voice, exactly `tokens` audio tokens."""
    base = SynthesisRequest.of(TEXTS[i % 3], sampling=Sampling(audio_seed=10 + i, temperature=0.3 + 0.2 * (i % 3),
                                                                top_k=20 - 5 * (i % 3)),
                               voice=Voice(seed=i), max_new_token=tokens, min_new_token=tokens)
    return replace(base, **changes)


def alone(model, req: SynthesisRequest) -> torch.Tensor:
    """The request's audio tokens from ChatTTS's own `_infer_code` through the lab engine's `lab_generate`."""
    chat = model.chat
    text = chat.normalizer(req.texts[0], True, True, None)
    return next(chat._infer_code([text], False, chat.device, True, chattts_params(model, req)[0])).ids[0].clone()


def assert_as_alone(model, row, req: SynthesisRequest) -> None:
    """The row's tokens and hidden states are the request's generated alone: the same tokens, and hidden states
    within STRAY; with quantized activations, up to and at its first token that differs (if any)."""
    chat = model.chat
    text = chat.normalizer(req.texts[0], True, True, None)
    own = next(chat._infer_code([text], False, chat.device, True, chattts_params(model, req)[0]))
    tokens, hiddens = own.ids[0], own.hiddens[0]
    assert row.generated == len(tokens)
    differ = (row.tokens[: row.generated] != tokens).any(1).nonzero().flatten().tolist()
    same = differ[0] if differ else len(tokens)
    precision = model.config.precision
    assert same == len(tokens) or engines.PRECISION[precision].quantized, f"token {same} differs"
    n = min(same + 1, len(tokens))  # the first that differs was sampled from a state made of the same tokens
    stray = (row.hiddens[:n] - hiddens[:n]).norm(dim=1) / hiddens[:n].norm(dim=1)
    assert float(stray.max()) <= STRAY[precision], (precision, stray.max())


def prompt(model, req: SynthesisRequest):
    return capture_prompt(model.chat, model.chat.normalizer(req.texts[0], True, True, None), chattts_params(model, req)[0])


def test_rows_that_join_and_leave_a_running_generation_get_the_tokens_they_get_alone(row_model):
    model = row_model
    requests = [request(0, 30), request(1, 40), request(2, 50)]
    decoder = model.engine.row_decoder(model.chat, 2)  # the third waits for the first to leave
    rows, waiting, step = [decoder.admit(prompt(model, requests[0]))], [prompt(model, r) for r in requests[1:]], 0
    while decoder.active or waiting:
        if waiting and (step == 5 or (decoder.free and step > 5)):  # joins after 5 steps, then into a freed row
            rows.append(decoder.admit(waiting.pop(0)))
        for row in decoder.step():
            decoder.release(row)
        step += 1
    assert [r.generated for r in rows] == [30, 40, 50] and [r.ended for r in rows] == ["max_new_token"] * 3
    for row, req in zip(rows, requests):
        assert_as_alone(model, row, req)


def slices_of(length: int, size: int) -> list[int]:
    """`size` positions at a time, the last two slices cut so that the very last is one position (the lab's fused
    one-position path)."""
    sizes = []
    while length > size + 1:
        sizes.append(size)
        length -= size
    return sizes + ([length - 1, 1] if length > 1 else [length])


def test_a_prompt_prefilled_in_slices_between_steps_gets_the_tokens_it_gets_alone(row_model):
    """Chunked prefill: a newcomer's prompt is filled a few positions at a time while two rows step between its
    slices; one of them ends and leaves mid-prefill (the row being filled moves down behind the last active row). The
    row being filled is not stepped, and every row gets the tokens its text gets alone."""
    model = row_model
    requests = [request(0, 10), request(2, 40), request(1, 30)]
    decoder = model.engine.row_decoder(model.chat, 3)
    rows = [decoder.admit(prompt(model, r)) for r in requests[:2]]
    for _ in range(5):
        decoder.step()
    newcomer = decoder.begin(prompt(model, requests[2]))
    assert decoder.free == 0 and decoder.filling is newcomer and newcomer not in decoder.active
    sizes = slices_of(newcomer.prompt.length, 3)
    assert len(sizes) > 6  # the first row ends (after 10 tokens) while the newcomer is being filled
    for i, size in enumerate(sizes):
        assert decoder.fill(newcomer, size) == (i == len(sizes) - 1)
        assert newcomer.prefilled == sum(sizes[: i + 1])
        for row in decoder.step():
            decoder.release(row)
        assert newcomer.steps == (2 if i == len(sizes) - 1 else 0)  # its first token, then stepped: only once in
    assert rows[0].ended and rows[0] not in decoder.active and newcomer in decoder.active
    while decoder.active:
        for row in decoder.step():
            decoder.release(row)
    for row, req in zip(rows + [newcomer], requests):
        assert_as_alone(model, row, req)


def test_a_row_released_while_it_is_being_filled_frees_its_row(model):
    decoder = model.engine.row_decoder(model.chat, 2)
    running = decoder.admit(prompt(model, request(0, 20)))
    gone = decoder.begin(prompt(model, request(1, 20)))
    decoder.fill(gone, 4)
    decoder.step()
    decoder.release(gone)
    assert decoder.filling is None and decoder.free == 1 and decoder.active == [running]
    with pytest.raises(RuntimeError, match="fill the row"):
        decoder.fill(gone, 4)
    later = decoder.admit(prompt(model, request(2, 12)))  # into the row it held
    while decoder.active:
        for row in decoder.step():
            decoder.release(row)
    assert_as_alone(model, running, request(0, 20))
    assert_as_alone(model, later, request(2, 12))


def test_a_row_that_ends_at_its_own_eos_leaves_and_its_row_is_reused(model):
    # seeds with no minimum length: the first seed whose row ends at its own EOS before 40 tokens
    decoder = model.engine.row_decoder(model.chat, 1)
    for seed in range(30):
        req = request(0, 40, min_new_token=0, sampling=Sampling(audio_seed=seed))
        row = decoder.admit(prompt(model, req))
        while not row.ended:
            decoder.step()
        decoder.release(row)
        if row.ended == "eos":
            break
    assert row.ended == "eos" and row.generated < 40
    assert torch.equal(row.tokens[: row.generated], alone(model, req))
    assert not decoder.active and decoder.free == 1


class Listener:
    """A streamed request's chunks, and a hook run in the loop thread at its first chunk."""

    def __init__(self, at_first=None):
        self.chunks, self.at_first = [], at_first

    def __call__(self, chunk) -> None:
        self.chunks.append(chunk)
        if len(self.chunks) == 1 and self.at_first:
            self.at_first()


@pytest.mark.parametrize("row_model", FLOAT_ROWS, ids="-".join, indirect=True)  # A's audio alone is its audio
def test_faults_inside_a_running_batch_end_alone_and_the_others_finish_intact(row_model):
    model = row_model
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=4, max_queue=4))
    hang_up = threading.Event()
    futures = {}

    def during_a():  # in the loop thread, between two steps of A: these arrive while A generates
        futures["malformed"] = scheduler.submit(Part(request(1, 20, sampling=Sampling(top_k=0)), threading.Event()))
        futures["hangs_up"] = scheduler.submit(Part(request(1, 40), hang_up, Listener(at_first=hang_up.set)))
        # runs out of its token budget after the hang-up above has freed the row before it (so it moves)
        futures["budget"] = scheduler.submit(Part(request(2, 20), threading.Event()))

    a = Listener(at_first=during_a)
    futures["a"] = scheduler.submit(Part(request(0, 40), threading.Event(), a))
    out = futures["a"].result(timeout=600)
    assert out.measurements.tokens == [40] and not out.measurements.interrupted
    assert out.measurements.scheduling == "continuous" and out.measurements.batch_requests >= 3
    assert len(out.audio[0]) == samples_for_tokens(40) == sum(len(c.audio[0]) for c in a.chunks)
    with pytest.raises(ValueError, match="top_k"):
        futures["malformed"].result(timeout=600)
    gone = futures["hangs_up"].result(timeout=600).measurements
    assert gone.interrupted and 0 < gone.tokens[0] < 40
    budget = futures["budget"].result(timeout=600).measurements
    assert budget.tokens == [20] and not budget.interrupted
    # A's audio is what A makes alone in the same scheduler (the rows' sums differ only by rounding)
    again = scheduler.submit(Part(request(0, 40), threading.Event(), Listener())).result(timeout=600)
    assert again.measurements.batch_requests == 1
    np.testing.assert_allclose(again.audio[0], out.audio[0], atol=1e-4)


def test_beyond_the_rows_and_the_queue_a_request_is_refused_at_once(model):
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=1, max_queue=1))
    refused = {}

    def while_busy():  # the only row generates; one request may wait, the next is refused
        refused["queued"] = scheduler.submit(Part(request(1, 8), threading.Event()))
        try:
            scheduler.submit(Part(request(2, 8), threading.Event()))
        except Overloaded as exc:
            refused["exc"] = exc

    first = scheduler.submit(Part(request(0, 16), threading.Event(), Listener(at_first=while_busy)))
    assert first.result(timeout=600).measurements.tokens == [16]
    assert refused["queued"].result(timeout=600).measurements.tokens == [8]
    assert "at capacity" in str(refused["exc"]) and refused["exc"].retry_after_s >= 1
    # a request of more texts than rows takes them one after another
    two = scheduler.submit(Part(SynthesisRequest.of(["One.", "Two."], max_new_token=6, min_new_token=6),
                                threading.Event())).result(timeout=600)
    assert two.measurements.tokens == [6, 6] and [len(a) for a in two.audio] == [samples_for_tokens(6)] * 2


def test_a_caller_that_hangs_up_frees_its_row_for_the_next_request(model):
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=1, max_queue=0))
    stop = threading.Event()
    gone = scheduler.submit(Part(request(0, 2048), stop, Listener(at_first=stop.set))).result(timeout=600)
    assert gone.measurements.interrupted and gone.measurements.tokens[0] < 2048
    # with no queue at all, the next request is accepted only because the row is free again
    assert scheduler.submit(Part(request(1, 8), threading.Event())).result(timeout=600).measurements.tokens == [8]


def streamed_and_whole(model, req: SynthesisRequest) -> tuple[np.ndarray, np.ndarray, int]:
    """The request streamed (its chunks joined) and then whole, on one scheduler: the same seeded tokens."""
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=1, max_queue=1))
    chunks = []
    streamed = scheduler.submit(Part(req, threading.Event(), on_chunk=chunks.append)).result()
    whole = scheduler.submit(Part(req, threading.Event())).result()
    assert streamed.measurements.tokens == whole.measurements.tokens
    return streamed.audio[0], whole.audio[0], len(chunks)


# SEAM_BOUND is fp32 decoding's: under int8/int4 the decoder's and vocoder's projections run in int8 (vocoder.py)
@pytest.mark.parametrize("row_model", FLOAT_ROWS, ids="-".join, indirect=True)
def test_a_streamed_clip_is_the_whole_clip_within_the_seam_bound(row_model, monkeypatch):
    """Chunks join without clicks: each continues its row's decoder and vocoder frames from the last chunk
    (engines/lab/chunk_decode.py), so the joined chunks are the whole clip's decode within float rounding
    (docs/serving.md states the bound), with no context decoded again. A chunk that continues nothing starts
    LEFT_CONTEXT tokens early instead; with neither, the seams break the bound by orders of magnitude."""
    from chattts_lab.engines.lab import continuous
    from chattts_lab.engines.lab.stream import SEAM_BOUND

    req = request(0, 200)
    streamed, whole, chunks = streamed_and_whole(row_model, req)
    assert chunks >= 5 and len(streamed) == len(whole) == samples_for_tokens(200)
    assert np.abs(streamed - whole).max() <= SEAM_BOUND * np.abs(whole).max()
    carried = continuous.decode_chunks
    monkeypatch.setattr(continuous, "decode_chunks", lambda chat, spans, left, hold: carried(
        chat, [(h, n, a, b, None) for h, n, a, b, _ in spans], left, hold))  # every chunk starts afresh
    streamed, whole, _ = streamed_and_whole(row_model, req)
    assert np.abs(streamed - whole).max() <= SEAM_BOUND * np.abs(whole).max()
    monkeypatch.setattr(RowDecoder, "left_context", 0)
    streamed, whole, _ = streamed_and_whole(row_model, req)
    assert np.abs(streamed - whole).max() > 100 * SEAM_BOUND * np.abs(whole).max()


def test_a_longer_prompt_joining_never_reads_what_an_unwritten_cache_slot_held(row_model):
    """A cache comes from torch.empty: whatever memory held is there until written. Filled with NaN here, a row
    that a longer prompt overtakes must still compute what it computes alone (its next slot, never written,
    becomes masked for it when the longer row joins)."""
    model = row_model
    short, long = request(2, 12), request(1, 12)
    decoder = model.engine.row_decoder(model.chat, 2)
    for k, v in decoder._caches:
        k.fill_(float("nan"))
        v.fill_(float("nan"))
    a = decoder.admit(prompt(model, short))
    decoder.step()
    b_prompt = prompt(model, long)
    assert b_prompt.length > a.length  # the joining prompt overtakes the running row
    b = decoder.admit(b_prompt)
    while decoder.active:
        for row in decoder.step():
            decoder.release(row)
    assert_as_alone(model, a, short)
    assert_as_alone(model, b, long)


def test_a_stream_sends_large_chunks_while_its_listener_is_ahead_and_what_it_has_when_it_runs_low():
    from chattts_lab.engines.lab.stream import HOLD
    from chattts_lab.serve.streaming import FIRST_AT, MAX_CHUNK, MIN_CHUNK, chunk_due

    low = 0.2
    assert not chunk_due(FIRST_AT - 1, 0, None, low, HOLD) and chunk_due(FIRST_AT, 0, None, low, HOLD)  # the first audio
    sent = FIRST_AT - HOLD
    waiting = sent + HOLD  # generated tokens at which MIN_CHUNK or MAX_CHUNK tokens wait to be sent
    assert not chunk_due(waiting + MAX_CHUNK - 1, sent, 5.0, low, HOLD)  # far ahead: waits for a large chunk
    assert chunk_due(waiting + MAX_CHUNK, sent, 5.0, low, HOLD)
    assert chunk_due(waiting + MIN_CHUNK, sent, low - 0.01, low, HOLD)  # about to run dry: sends what it has
    assert not chunk_due(waiting + MIN_CHUNK - 1, sent, low - 0.01, low, HOLD)  # but not a chunk too small to pay
    # a loop slower than real time (no low water): its listeners fall behind whatever it sends, so full chunks only
    assert not chunk_due(waiting + MAX_CHUNK - 1, sent, -1.0, None, HOLD) and chunk_due(waiting + MAX_CHUNK, sent, -1.0, None, HOLD)


def test_the_low_water_follows_the_loops_slowest_recent_iterations_and_is_gone_when_it_is_slower_than_real_time():
    from chattts_lab.serve.streaming import LOW_WATER_LOOPS, LOW_WATER_MIN_S, PACE_LOOPS, LoopPace

    pace, window = LoopPace(), PACE_LOOPS
    assert pace.low_water_s() == LOW_WATER_MIN_S  # nothing measured yet
    for seconds in [0.005] * (window - 1) + [0.1]:  # fast (a token's audio is 21.3 ms), one slow iteration
        pace.took(seconds)
    assert pace.low_water_s() == pytest.approx(LOW_WATER_LOOPS * 0.1)
    for seconds in [0.005] * (window - 1) + [0.4]:  # a long prefill slice or decode: slow, yet once
        pace.took(seconds)
    assert pace.low_water_s() == pytest.approx(LOW_WATER_LOOPS * 0.4)
    for _ in range(window // 10 + 1):  # quick steps, a long decode every tenth: under real time at the median only
        for seconds in [0.015] * 9 + [0.095]:
            pace.took(seconds)
    assert pace.low_water_s() is None
    for _ in range(window):  # only the latest count
        pace.took(0.001)
    assert pace.low_water_s() == LOW_WATER_MIN_S
    for _ in range(window // 4):  # newcomers' slices and first chunks: each once, so not a pace for the running rows
        pace.took(0.05, admitting=True)
    assert pace.low_water_s() == pytest.approx(LOW_WATER_LOOPS * 0.05)
    for _ in range(window):
        pace.took(0.03)  # slower than real time: no small chunks at all
    assert pace.low_water_s() is None


def test_rows_sampled_together_draw_what_each_row_draws_alone(model):
    """The loop samples every row in one set of tensor ops (sample_rows); each row's own settings and seed still
    decide its draw: the tokens equal its own sampler's, for rows of different temperature, top-K and seed."""
    from chattts_lab.engines.lab.sampler import sample_rows

    decoder = model.engine.row_decoder(model.chat, 3)
    rows = [decoder.admit(prompt(model, request(i, 24)), owner=None) for i in range(3)]
    for _ in range(5):  # their repetition windows hold tokens
        decoder.step()
    assert all(r.sampler.chain for r in rows)  # ChatTTS's usual chain: the loop samples these rows together
    assert len({r.sampler.chain["top_k"] for r in rows}) == 3
    seeded = torch.Generator().manual_seed(0)
    logits = torch.randn(3, rows[0].sampler.freq.size(0), decoder.heads.vocab, generator=seeded)
    together = sample_rows([r.sampler for r in rows], logits, [r.steps for r in rows])  # flat: top-K decides
    alone = [r.sampler.sample(logits[j], r.steps) for j, r in enumerate(rows)]
    assert [t.tolist() for t in together] == [a.tolist() for a in alone]


def test_unseeded_rows_sampled_together_draw_what_each_draws_alone_from_the_same_global_seed(model):
    """Rows without a seed draw in one call (sample_rows), from torch's global generator in row order: what each row's
    own sampler draws in turn after the same torch.manual_seed; a seeded row among them keeps its own draw."""
    from chattts_lab.engines.lab.sampler import sample_rows

    decoder = model.engine.row_decoder(model.chat, 3)
    def unseeded(i):
        return replace(request(i, 24), sampling=replace(request(i, 24).sampling, audio_seed=None))

    rows = [decoder.admit(prompt(model, r), owner=None) for r in (unseeded(0), request(1, 24), unseeded(2))]
    decoder.step()
    seeded = torch.Generator().manual_seed(0)
    logits = torch.randn(3, rows[0].sampler.freq.size(0), decoder.heads.vocab, generator=seeded)
    torch.manual_seed(5)
    together = sample_rows([r.sampler for r in rows], logits, [r.steps for r in rows])
    torch.manual_seed(5)
    alone = [r.sampler.sample(logits[j], r.steps) for j, r in enumerate(rows)]
    assert [t.tolist() for t in together] == [a.tolist() for a in alone]
    torch.manual_seed(6)
    assert [t.tolist() for t in sample_rows([r.sampler for r in rows], logits, [r.steps for r in rows])] != \
        [t.tolist() for t in together]  # the unseeded rows did draw from the global generator


def test_a_burst_is_counted_as_it_arrives_before_the_loop_admits_anyone(model):
    """Other model work (a sweep) holds the model, so the loop admits nothing while the burst lands: the bound is
    counted at arrival, each request waiting unless a free row is there for it (max_rows + max_queue in all)."""
    busy = threading.Lock()
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=2, max_queue=1), hold=lambda: busy)
    accepted, refused = [], []
    with busy:
        for i in range(15):  # five times the bound
            try:
                accepted.append(scheduler.submit(Part(request(i, 8), threading.Event())))
            except Overloaded as exc:
                refused.append(exc)
        assert scheduler.status() == (3, 0, 2)
        # the next sentence of a request already taken was counted when that request arrived: never refused
        accepted.append(scheduler.submit(Part(request(15, 8), threading.Event(), continues=True)))
    assert len(accepted) == 4 and len(refused) == 12
    assert all(exc.retry_after_s >= 1 and "at capacity" in str(exc) for exc in refused)
    assert [f.result(timeout=600).measurements.tokens for f in accepted] == [[8]] * 4



def test_chunks_due_together_decode_in_one_call_as_each_decodes_alone(model):
    """The rows' chunks due at one step decode in one decoder and vocoder call (a call's fixed cost is paid once, not
    per row), padded to the widest span; each row's audio is what it gets decoded alone, within the seam bound: a
    middle chunk (the widest), a row's first chunk, a row's last chunk (its true end is heard), a whole short clip
    (both ends heard), and then the next chunks of two of them, continuing their frames."""
    from chattts_lab.engines.lab.stream import SEAM_BOUND
    from chattts_lab.metrics import SAMPLES_PER_TOKEN as T

    decoder = model.engine.row_decoder(model.chat, 4)
    joins = {0: request(0, 120), 30: request(1, 30), 36: request(2, 120), 44: request(3, 16)}
    rows = []
    for step in range(60):
        if step in joins:
            rows.append(decoder.admit(prompt(model, joins[step])))
        for row in decoder.step():
            decoder.release(row)
    middle, last, first, whole = rows
    assert last.ended and whole.ended and not (middle.ended or first.ended)
    assert middle.generated - 8 > max(first.generated, last.generated)  # the others are padded to its width
    hold = decoder.hold
    spans = [(middle, 10 * T, (middle.generated - 2 * hold) * T), (first, 0, (first.generated - 2 * hold) * T),
             (last, 10 * T, samples_for_tokens(last.generated)), (whole, 0, samples_for_tokens(whole.generated))]
    following = [(middle, b, (middle.generated - hold) * T) for _, _, b in spans[:1]] + [
        (first, b, (first.generated - hold) * T) for _, _, b in spans[1:2]]
    vocoder_batches = []
    hook = model.chat.vocos.head.out.register_forward_hook(lambda _, args, __: vocoder_batches.append(len(args[0])))
    try:
        together = decoder.decode_spans(spans) + decoder.decode_spans(following)
    finally:
        hook.remove()
    assert vocoder_batches == [4, 2]
    for row in (middle, first, last, whole):
        row.chunk = None  # decoded alone from here
    alone = [decoder.decode_spans([span])[0] for span in spans[:2]] + [
        decoder.decode_spans([span])[0] for span in spans[2:] + following]
    for (row, a, b), audio, own in zip(spans + following, together, alone):
        assert audio.shape == own.shape == (b - a,)
        assert np.abs(audio - own).max() <= SEAM_BOUND * np.abs(own).max()

def test_a_due_chunk_takes_every_streaming_rows_waiting_tokens_into_its_call(model, tmp_path, monkeypatch):
    """Rows that joined at different steps fall due at different steps; a decode call made for one row's due chunk
    takes what every other streaming row has waiting (serve.streaming.joins_call), so the call's fixed cost is paid
    once and the rows fall due together from then on: after B's first chunk (alone: a first audio waits for no one)
    to B's end, every call holds both rows. Each stream is still its whole clip: the chunks add up to every token's
    audio."""
    import json

    from chattts_lab.serve.streaming import LoopPace

    # Chunks by token counts alone (no low water: full chunks after the first), so that which tokens wait when does
    # not depend on this machine's speed.
    monkeypatch.setattr(LoopPace, "low_water_s", lambda self: None)
    trace = tmp_path / "loop.jsonl"
    monkeypatch.setenv("CHATTTS_LAB_LOOP_TRACE", str(trace))
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=2, max_queue=1))
    later = {}
    a = scheduler.submit(Part(request(0, 100), threading.Event(), Listener(
        at_first=lambda: later.setdefault("b", scheduler.submit(Part(request(1, 60), threading.Event(), Listener())))
    )))
    out_a, out_b = a.result(timeout=600), later["b"].result(timeout=600)
    assert out_a.measurements.tokens == [100] and out_b.measurements.tokens == [60]
    assert [len(out_a.audio[0]), len(out_b.audio[0])] == [samples_for_tokens(100), samples_for_tokens(60)]
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    decodes = sorted((r for r in records if r["kind"] == "decode"), key=lambda r: r["t"])
    with_b = [i for i, r in enumerate(decodes) if 2 in r["each"]]
    assert len(with_b) >= 3  # B's first chunk, a middle one and its last
    assert decodes[with_b[0]]["each"] == [2] and decodes[with_b[0]]["first"] == 1
    assert all(sorted(decodes[i]["each"]) == [1, 2] for i in range(with_b[0] + 1, with_b[-1] + 1))
    assert any(r["joined"] for r in decodes)


def test_an_engine_that_cannot_admit_rows_gives_no_row_decoder_and_the_scheduler_says_why():
    stock = load_model(LoadConfig(model=TINY, precision="fp32", engine="stock", threads=1))
    assert stock.engine.row_decoder(stock.chat, 2) is None
    with pytest.raises(RuntimeError, match="stock engine: stock ChatTTS generates a batch from start to end"):
        row_decoder_of(stock, 2)


def loop_order(records: list[dict]) -> list[dict]:
    """The trace's prefills, slices and steps in the order the loop ran them."""
    return [r for r in sorted(records, key=lambda r: r["t"]) if r["kind"] in ("prefill", "slice", "step")]


def test_newcomers_arriving_together_are_prefilled_in_slices_one_per_step_and_the_trace_records_it(
        model, tmp_path, monkeypatch):
    """While rows generate, each loop iteration prefills at most one slice of one newcomer's prompt (chunked prefill):
    a burst of arrivals never holds the running rows for a whole prompt, let alone all of them at once (the loop
    trace, $CHATTTS_LAB_LOOP_TRACE, shows the order). Each newcomer's slices cover its prompt in order, and its audio
    is what it makes alone."""
    import json

    from chattts_lab.serve import scheduler as loop

    monkeypatch.setattr(loop, "PREFILL_SLICE", 4)  # the tiny prompts are 16-60 positions: several slices each
    trace = tmp_path / "loop.jsonl"
    monkeypatch.setenv("CHATTTS_LAB_LOOP_TRACE", str(trace))
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=4, max_queue=4))
    burst = []

    def during_a():  # in the loop thread: three arrive together while A generates
        burst.extend(scheduler.submit(Part(request(i, 30), threading.Event())) for i in (1, 2, 3))

    first = scheduler.submit(Part(request(0, 60), threading.Event(), Listener(at_first=during_a)))
    assert first.result(timeout=600).measurements.tokens == [60]
    together = [f.result(timeout=600) for f in burst]
    assert [o.measurements.tokens for o in together] == [[30], [30], [30]]
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    order = loop_order(records)
    assert [r["kind"] for r in order].count("prefill") == 1  # A, into an idle loop: whole
    between_steps = " ".join("step" if r["kind"] == "step" else "prefill" for r in order)
    assert "prefill prefill" not in between_steps
    slices = [r for r in order if r["kind"] == "slice"]
    assert {r["row"] for r in slices} == {2, 3, 4}
    for row in (2, 3, 4):
        own = [r for r in slices if r["row"] == row]
        # whole slices, then a last one of what is left, with a short tail folded in (never under half a slice)
        assert all(r["positions"] == 4 for r in own[:-1]) and 2 <= own[-1]["positions"] < 6, own
        assert [r["start"] for r in own] == [sum(r["positions"] for r in own[:i]) for i in range(len(own))]
        assert sum(r["positions"] for r in own) == own[0]["prompt"] and [r["last"] for r in own][-1]
        assert len(own) >= 2
    chunks = [r for r in records if r["kind"] == "chunk"]
    assert {r["row"] for r in chunks} == {1}
    decodes = [r for r in records if r["kind"] == "decode"]
    assert sum(sum(r["tokens"]) for r in decodes) == sum(r["tokens"] for r in chunks)
    for i, out in zip((1, 2, 3), together):  # each alone in the same scheduler (its rows' sums differ by rounding)
        again = scheduler.submit(Part(request(i, 30), threading.Event())).result(timeout=600)
        assert again.measurements.batch_requests == 1
        np.testing.assert_allclose(again.audio[0], out.audio[0], atol=1e-4)


def test_a_prompts_short_tail_goes_with_its_last_slice_and_a_long_one_is_a_slice_of_its_own():
    from chattts_lab.serve.scheduler import PREFILL_SLICE, slice_positions

    half = PREFILL_SLICE // 2
    assert slice_positions(PREFILL_SLICE + half - 1) == PREFILL_SLICE + half - 1  # a tail under half a slice: all now
    assert slice_positions(PREFILL_SLICE + half) == PREFILL_SLICE  # half a slice left after it: a slice of its own
    assert slice_positions(3) == 3 and slice_positions(5 * PREFILL_SLICE) == PREFILL_SLICE


def test_a_listener_that_hangs_up_while_its_prompt_is_prefilled_frees_its_row(model, tmp_path, monkeypatch):
    """A caller gone between two slices of its prompt: its row is freed at the next iteration (not filled further,
    never stepped), its answer says it was stopped with no audio, the row takes the next request, and the row that
    ran beside it all along is intact."""
    import json

    from chattts_lab.serve import scheduler as loop

    monkeypatch.setattr(loop, "PREFILL_SLICE", 4)
    trace = tmp_path / "loop.jsonl"
    monkeypatch.setenv("CHATTTS_LAB_LOOP_TRACE", str(trace))
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=2, max_queue=0))
    hang_up, submitted, later = threading.Event(), threading.Event(), {}

    def during_a():  # the newcomer hangs up as it takes its row (its first slice is prefilled in that iteration)
        later["gone"] = scheduler.submit(Part(request(1, 30), hang_up, Listener(), on_start=hang_up.set))
        submitted.set()

    a = scheduler.submit(Part(request(0, 80), threading.Event(), Listener(at_first=during_a)))
    assert submitted.wait(timeout=600)
    gone = later["gone"].result(timeout=600)
    assert gone.measurements.interrupted and gone.measurements.tokens == [0] and len(gone.audio[0]) == 0
    # admitted only because the row the hang-up held is free again (no queue at all)
    assert scheduler.submit(Part(request(2, 20), threading.Event())).result(timeout=600).measurements.tokens == [20]
    out = a.result(timeout=600)
    assert out.measurements.tokens == [80] and not out.measurements.interrupted
    slices = [r for r in loop_order(json.loads(line) for line in trace.read_text().splitlines())
              if r["kind"] == "slice" and r["row"] == 2]
    assert len(slices) == 1 and not slices[0]["last"]  # one slice, then freed
    again = scheduler.submit(Part(request(0, 80), threading.Event(), Listener())).result(timeout=600)
    np.testing.assert_allclose(again.audio[0], out.audio[0], atol=1e-4)


def test_the_loop_trace_is_off_unless_its_file_is_named(model, monkeypatch):
    monkeypatch.delenv("CHATTTS_LAB_LOOP_TRACE", raising=False)
    scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=1, max_queue=1))
    assert scheduler.submit(Part(request(0, 8), threading.Event(), Listener())).result(timeout=600)
    assert not scheduler._trace.enabled and scheduler._trace._records == []
