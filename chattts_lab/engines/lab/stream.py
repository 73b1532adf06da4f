"""Lab streaming: decode only the new frames of each chunk, and send the first chunk early.

Stock `Chat._infer(stream=True)` re-decodes the whole prefix for every chunk and drops its first two
chunks, so the first audio waits for 72 steps and decoding grows quadratically. Here each chunk decodes
its new tokens once, the decoder's and vocoder's convolutions continuing each text's frames from the last
chunk (chunk_decode.py), keeps back the last `hold` tokens (whose right context has not been generated yet)
for the next chunk, and the first chunk comes after `first_chunk` steps. The concatenated chunks have
exactly (2N-1)*256 samples per text, like a full decode, and differ from it only where a chunk's carried
frames were computed before their right context existed (within SEAM_BOUND).
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np

from chattts_lab.engines.lab.chunk_decode import decode_chunks
from chattts_lab.metrics import SAMPLES_PER_TOKEN, samples_for_tokens

log = logging.getLogger(__name__)

FIRST_CHUNK = 12  # steps before the first audio (~0.25 s of audio)
# Tokens decoded before a chunk that continues no carried frames (one decoded alone from the middle of a clip). The
# decoder's and vocoder's convolutions reach fewer than 8 tokens back: with 8, such a chunk joins its clip within
# rounding (scripts/probes/seam_bound.py: full-size weights at lab int8, 256 tokens: the same largest difference,
# 0.02 % of the clip's peak, at 8, 12, 16 and 24 tokens; 10x that with 4, 77 % with none).
LEFT_CONTEXT = 8
HOLD = 6  # trailing tokens kept back until their right context exists
SEAM_BOUND = 1e-4  # fp32: the largest difference between a streamed clip and its whole decode, a fraction of its peak


def stream_infer(chat, engine, texts: list[str], params_refine, params_code, skip_refine_text: bool = True,
                 do_text_normalization: bool = True, first_chunk: int = FIRST_CHUNK, left: int = LEFT_CONTEXT,
                 hold: int = HOLD) -> Iterator[np.ndarray]:
    """Yield float32 arrays [B, samples] of new audio per chunk; `engine` is the LabRuntime installed on `chat`."""
    text = prepare_texts(chat, texts, params_refine, skip_refine_text, do_text_normalization)
    emitted = 0  # samples already sent, the same for every text
    hiddens, lengths, sent = None, None, []
    states = [None] * len(text)  # each text's decoder and vocoder frames, carried from chunk to chunk
    with engine.first_chunk(first_chunk):
        for result in chat._infer_code(text, True, chat.device, True, params_code):
            hiddens, lengths = result.hiddens, [int(h.shape[0]) for h in result.hiddens]
            upto = SAMPLES_PER_TOKEN * max(0, max(lengths) - hold)
            if upto > emitted:
                sent.append(_decode_chunk(chat, engine, hiddens, lengths, emitted, upto, states, left, hold))
                emitted = upto
                yield sent[-1]
    if hiddens is None:
        return
    end = samples_for_tokens(max(lengths))  # the last chunk: everything left, to the true end
    if end > emitted:
        sent.append(_decode_chunk(chat, engine, hiddens, lengths, emitted, end, states, left, hold))
        yield sent[-1]
    recorder = engine.recorder
    if recorder is not None and sent:  # the call's whole audio is what was sent
        recorder.audio_done(lengths, np.concatenate(sent, axis=1))


def prepare_texts(chat, texts: list[str], params_refine, skip_refine_text: bool, normalize: bool) -> list[str]:
    """The texts as ChatTTS's `infer` hands them to code generation: normalized, then refined when asked."""
    text = [chat.normalizer(t, normalize, True, None) for t in texts]
    if not skip_refine_text:
        refined = chat._refine_text(text, chat.device, params_refine)
        text = chat.tokenizer.decode([i[i.less(chat.tokenizer.break_0_ids)] for i in refined.ids])
        refined.destroy()
    return text


def prepare_text(chat, text: str, params_refine, skip_refine_text: bool, normalize: bool) -> str:
    return prepare_texts(chat, [text], params_refine, skip_refine_text, normalize)[0]


def _decode_chunk(chat, engine, hiddens, lengths, a: int, b: int, states: list, left: int, hold: int) -> np.ndarray:
    """Samples [a, b) of every text's audio (zero past a text's end), each continuing its text's `states` (which
    it updates); the call's stage clocks (`engine.recorder`) count the decoder's and vocoder's time."""
    decoded = decode_chunks(chat, [(h, n, a, b, s) for h, n, s in zip(hiddens, lengths, states)], left, hold,
                            engine.recorder)
    states[:] = [state for _, state in decoded]
    return np.stack([audio for audio, _ in decoded])
