"""Dynamic batching in the library: requests merged into one generation and split back, and the asyncio batcher
that decides which requests share a batch. ChatTTS on tiny random weights; no clocks: a batch is made to wait
for company (a long max wait) and runs as soon as it is full, so which requests share it is certain.

Audio lengths are exact: N audio tokens decode to (2N-1)*256 samples (min_new_token == max_new_token == N).
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from chattts_lab import InvalidRequest, Sampling, SynthesisRequest
from chattts_lab.serve.batch import Part, shared_settings, synthesize_parts
from chattts_lab.serve.batcher import Batcher
from chattts_lab.serve.policy import BatchPolicy
from chattts_lab.metrics import samples_for_tokens
from tests.support.event_loop import run_in_fresh_loop

N = 24
FIXED = dict(min_new_token=N, max_new_token=N, sampling=Sampling(audio_seed=7))


def part(*texts: str, **changes) -> Part:
    return Part(SynthesisRequest.of(list(texts), **(FIXED | changes)), threading.Event())


def test_parts_run_as_one_generation_and_each_gets_its_own_texts(tiny_model):
    parts = [part("First caller."), part("Second caller, two texts.", "Its second text.")]
    outs = synthesize_parts(tiny_model, parts)
    assert [o.texts for o in outs] == [("First caller.",), ("Second caller, two texts.", "Its second text.")]
    assert [len(o.audio) for o in outs] == [1, 2]
    for out in outs:
        assert [len(a) for a in out.audio] == [samples_for_tokens(N)] * len(out.audio)
        assert out.measurements.batch_requests == 2 and out.measurements.gpt_steps >= N


def test_a_stopped_part_ends_early_while_the_rest_of_its_batch_finishes(tiny_model):
    stopped, running = part("Stops at once."), part("Runs to the end.")
    stopped.stop.set()  # asked before the first step: it keeps at most one step's audio
    outs = synthesize_parts(tiny_model, [stopped, running])
    assert outs[0].measurements.interrupted and outs[0].measurements.tokens == [1]
    assert not outs[1].measurements.interrupted and outs[1].measurements.tokens == [N]
    assert len(outs[1].audio[0]) == samples_for_tokens(N)


def test_each_streaming_part_receives_only_its_own_audio(tiny_model):
    received = {0: [], 1: []}
    parts = [part("One."), part("Two, and longer.")]
    for i, p in enumerate(parts):
        p.on_chunk = lambda chunk, i=i: received[i].append(chunk)
    outs = synthesize_parts(tiny_model, parts, stream=True)
    for i in (0, 1):
        assert received[i], f"part {i} got no stream"
        assert all(len(chunk.audio) == 1 and chunk.batch_requests == 2 for chunk in received[i])
        assert outs[i].measurements.ttfa_s == received[i][0].elapsed_s


def test_requests_that_differ_in_voice_or_limits_cannot_share_a_batch(tiny_model):
    assert shared_settings(part("a").request) == shared_settings(part("b").request)
    assert shared_settings(part("a").request) != shared_settings(part("a", max_new_token=N + 1).request)
    with pytest.raises(ValueError, match="cannot share a batch"):
        synthesize_parts(tiny_model, [part("a"), part("b", speed=2)])


def test_batcher_fills_batches_by_group_in_arrival_order():
    """A fake run (named as such): it records which parts ran together; the batching logic under test is real."""
    ran: list[list[str]] = []

    def record(key, parts):
        ran.append([p.request.texts[0] for p in parts])
        return [p.request.texts[0] for p in parts]

    async def scenario():
        batcher = Batcher(record, BatchPolicy(max_batch=2, max_wait_ms=60_000))  # full batches run at once
        calls = [batcher.submit(key, part(text)) for key, text in
                 [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3"), ("a", "a4")]]
        return await asyncio.gather(*calls)

    results = run_in_fresh_loop(scenario())
    assert results == ["a1", "b1", "a2", "b2", "a3", "a4"]  # each caller gets its own result
    assert ran == [["a1", "a2"], ["b1", "b2"], ["a3", "a4"]]


def test_batcher_tells_every_caller_of_a_failed_batch_and_serves_the_next():
    def run(key, parts):
        if key == "bad":
            raise MemoryError("out of memory in this batch")
        return ["ok"] * len(parts)

    async def scenario():
        batcher = Batcher(run, BatchPolicy(max_batch=2, max_wait_ms=60_000))
        return await asyncio.gather(batcher.submit("bad", part("x")), batcher.submit("bad", part("y")),
                                    batcher.submit("good", part("z")), batcher.submit("good", part("w")),
                                    return_exceptions=True)

    results = run_in_fresh_loop(scenario())
    assert [type(r) for r in results[:2]] == [MemoryError, MemoryError] and results[2:] == ["ok", "ok"]


def test_batch_policy_refuses_impossible_settings():
    with pytest.raises(ValueError, match="max batch"):
        BatchPolicy(max_batch=0)
    with pytest.raises(ValueError, match="max wait"):
        BatchPolicy(max_wait_ms=-1)


def test_a_bad_request_is_refused_before_it_joins_a_batch():
    from chattts_lab.serve.speech import serve
    from chattts_lab.serve.context import AppContext
    from chattts_lab.serve.policy import ServingPolicy
    from chattts_lab.serve.runtime import RuntimeSettings

    with pytest.raises(InvalidRequest, match="empty"):
        run_in_fresh_loop(serve(AppContext(ServingPolicy(model="synthetic-tiny")), RuntimeSettings(), SynthesisRequest.of("   ")))


def test_requests_with_different_voices_share_a_batch_and_each_row_speaks_in_its_own(tiny_model):
    """A batch draws its random numbers row by row, so row i of any batch of two with the same seed makes the same
    draws: each row of a mixed-voice batch must then match that row of a batch where both rows have its voice."""
    from chattts_lab import Voice

    def voiced(seed: int) -> Part:
        return part("The same sentence for every row.", voice=Voice(seed=seed))

    assert shared_settings(voiced(1).request) == shared_settings(voiced(2).request)
    all_a = synthesize_parts(tiny_model, [voiced(1), voiced(1)])
    all_b = synthesize_parts(tiny_model, [voiced(2), voiced(2)])
    mixed = synthesize_parts(tiny_model, [voiced(1), voiced(2)])
    assert not np.allclose(all_a[1].audio[0], all_b[1].audio[0], atol=1e-3), "the two voices should differ"
    np.testing.assert_allclose(mixed[0].audio[0], all_a[0].audio[0], atol=1e-4)
    np.testing.assert_allclose(mixed[1].audio[0], all_b[1].audio[0], atol=1e-4)


def test_interrupt_stops_every_synthesis_of_its_session_and_none_of_another():
    from chattts_lab.serve.speech import Running

    running = Running()
    with running.mark("a") as first, running.mark("a") as second, running.mark("b") as other:
        assert running.interrupt("a")
        assert first.is_set() and second.is_set() and not other.is_set()
    with running.mark("a") as first:
        with running.mark("a"):
            pass  # the second request of the session ends first: the first must stay interruptible
        assert running.interrupt("a") and first.is_set()
    assert not running.interrupt("a")  # nothing of that session is running any more
