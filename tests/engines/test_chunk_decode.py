"""A stream's chunks decoded from carried frames (engines/lab/chunk_decode.py): ChatTTS's real decoder, Vocos and
ISTFT on tiny synthetic weights, against ChatTTS's own whole decode. (How streamed chunks join into the whole clip
through the continuous loop: tests/serve/test_continuous.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chattts_lab.engines.lab.chunk_decode import decode_chunks
from chattts_lab.engines.lab.stream import HOLD, LEFT_CONTEXT, SEAM_BOUND
from chattts_lab.metrics import SAMPLES_PER_TOKEN as T, samples_for_tokens
from chattts_lab.models import LoadConfig, load_model
from tests.conftest import TINY

N = 90  # tokens of the clip


@pytest.fixture(scope="module")
def chat_and_whole():
    chat = load_model(LoadConfig(model=TINY, precision="fp32", engine="lab", threads=1)).chat
    hiddens = torch.randn(N, chat.decoder.decoder.conv_in[0].in_channels * 2, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        whole = np.asarray(chat._decode_to_wavs([hiddens.clone()], True))[0]
    return chat, hiddens, whole


def streamed(chat, hiddens, ends: list[int], carry: bool, left: int = LEFT_CONTEXT) -> np.ndarray:
    """The clip in chunks ending at `ends` tokens (HOLD held back from each but the last), each continuing the
    last's state when `carry`."""
    parts, state, sent = [], None, 0
    for k in ends:
        b = samples_for_tokens(N) if k == N else T * (k - HOLD)
        (audio, next_state), = decode_chunks(chat, [(hiddens, k, sent, b, state if carry else None)], left, HOLD)
        parts.append(audio)
        state, sent = next_state, b
    return np.concatenate(parts)


def test_a_whole_clip_as_one_chunk_is_chattts_own_decode(chat_and_whole):
    chat, hiddens, whole = chat_and_whole
    (audio, _), = decode_chunks(chat, [(hiddens, N, 0, samples_for_tokens(N), None)], LEFT_CONTEXT, HOLD)
    assert audio.shape == whole.shape
    assert np.abs(audio - whole).max() <= 1e-5 * np.abs(whole).max()


@pytest.mark.parametrize("ends", [[24, 36, 48, 60, 72, 90], [13, 19, 50, 51, 90]], ids=["even", "uneven"])
def test_chunks_that_carry_their_frames_join_into_the_whole_clip_without_context(chat_and_whole, ends):
    """Carried frames stand in for the context a chunk would otherwise decode again: with none (left 0) the chunks
    join within the seam bound, where chunks that start afresh without context break it by orders of magnitude."""
    chat, hiddens, whole = chat_and_whole
    peak = np.abs(whole).max()
    carried = streamed(chat, hiddens, ends, carry=True, left=0)
    assert carried.shape == whole.shape
    assert np.abs(carried - whole).max() <= SEAM_BOUND * peak
    assert np.abs(streamed(chat, hiddens, ends, carry=False, left=0) - whole).max() > 100 * SEAM_BOUND * peak


def test_a_state_is_continued_only_by_the_span_that_starts_where_it_ended(chat_and_whole):
    """A span that starts elsewhere (a chunk sent again, or one from another point of the clip) starts afresh,
    LEFT_CONTEXT tokens before its first sample: exactly what it gets with no state."""
    chat, hiddens, _ = chat_and_whole
    (_, state), = decode_chunks(chat, [(hiddens, 40, 0, T * 34, None)], LEFT_CONTEXT, HOLD)
    assert state.sample == T * 34
    again = decode_chunks(chat, [(hiddens, 60, T * 20, T * 54, state)], LEFT_CONTEXT, HOLD)[0][0]
    fresh = decode_chunks(chat, [(hiddens, 60, T * 20, T * 54, None)], LEFT_CONTEXT, HOLD)[0][0]
    np.testing.assert_array_equal(again, fresh)
