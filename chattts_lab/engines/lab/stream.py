"""Lab streaming: decode only the new frames of each chunk, and send the first chunk early.

Stock `Chat._infer(stream=True)` re-decodes the whole prefix for every chunk and drops its first two
chunks, so the first audio waits for 72 steps and decoding grows quadratically. Here each chunk decodes
its new tokens plus `left` tokens of context (the decoder's and vocoder's convolutions need them), keeps
back the last `hold` tokens (whose right context has not been generated yet) for the next chunk, and
the first chunk comes after `first_chunk` steps. The concatenated chunks have exactly (2N-1)*256
samples per text, like a full decode, and differ from it only by the context cut at chunk starts.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np
import torch

from chattts_lab.metrics import SAMPLES_PER_TOKEN, samples_for_tokens

log = logging.getLogger(__name__)

FIRST_CHUNK = 12  # steps before the first audio (~0.25 s of audio)
# Tokens re-decoded before each chunk. The decoder's and vocoder's convolutions reach fewer than 8 tokens back: with 8,
# a streamed clip is its whole decode within rounding (scripts/probes/seam_bound.py: full-size weights at lab
# int8, 256 tokens, the continuous loop's chunk schedule: the same largest difference, 0.02 % of the clip's peak, at 8,
# 12, 16 and 24 tokens, so not from the seams; 10x that with 4, 77 % with none. Tiny weights at fp32: 1e-6 of the
# peak, the tested bound below). Each token of context costs decode time in every chunk.
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
    with engine.first_chunk(first_chunk):
        for result in chat._infer_code(text, True, chat.device, True, params_code):
            hiddens, lengths = result.hiddens, [int(h.shape[0]) for h in result.hiddens]
            upto = SAMPLES_PER_TOKEN * max(0, max(lengths) - hold)
            if upto > emitted:
                sent.append(_decode_span(chat, hiddens, lengths, emitted, upto, left))
                emitted = upto
                yield sent[-1]
    if hiddens is None:
        return
    end = samples_for_tokens(max(lengths))  # the last chunk: everything left, to the true end
    if end > emitted:
        sent.append(_decode_span(chat, hiddens, lengths, emitted, end, left))
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


def _decode_span(chat, hiddens, lengths, a: int, b: int, left: int) -> np.ndarray:
    """Samples [a, b) of the full decode of each text, decoding tokens from `left` before sample a onwards."""
    return np.stack(decode_spans(chat, [(h, n, a, b) for h, n in zip(hiddens, lengths)], left))


def decode_spans(chat, spans: list[tuple], left: int) -> list[np.ndarray]:
    """Samples [a, b) of each (hiddens, tokens, a, b)'s full decode, in as few calls of the decoder and vocoder as
    keep each span's audio what it gets decoded alone (a call costs about 15 ms before its first token, so rows
    whose chunks are due together share one).

    A span decodes from `left` tokens before its sample a to HOLD tokens after b where they exist. In one call every
    span takes the widest span's width: first with more of its own tokens before it (more left context only
    helps), then with zeros. Zeros are no text's audio: at a text's true start or end they change what is heard
    there (the convolutions and the vocoder's overlap-add read them as frames), so they go where the span has
    context to spare: after a span that keeps HOLD tokens back, before a span that reaches its text's end. A span
    with no room on either side (a whole short clip) decodes in a call of its own."""
    cuts = [_cut(n, a, b, left) for _, n, a, b in spans]
    width = max(last - first for first, last in cuts)
    out = [np.zeros(b - a, dtype=np.float32) for _, _, a, b in spans]
    if width == 0:
        return out
    shared, own = [], []  # (span index, part padded to width, tokens before its sample 0), and spans decoded alone
    for i, ((hiddens, n, a, b), (first, last)) in enumerate(zip(spans, cuts)):
        first = max(0, last - width)  # widen with its own tokens first
        part, pad = hiddens[first:last], width - (last - first)
        ends = b >= samples_for_tokens(n)
        if pad and ends and a // SAMPLES_PER_TOKEN < left:  # its start and its end are both heard
            own.append(i)
            continue
        zeros = part.new_zeros(pad, part.shape[1])
        shared.append((i, torch.cat([zeros, part] if ends else [part, zeros]), first - pad if ends else first))
    calls = [shared] + [[(i, spans[i][0][cuts[i][0] : cuts[i][1]], cuts[i][0])] for i in own]
    for call in filter(None, calls):
        wavs = np.asarray(chat._decode_to_wavs([part for _, part, _ in call], True))  # (it empties its list)
        for wav, (i, _, start) in zip(wavs, call):
            _, n, a, b = spans[i]
            got = wav[a - start * SAMPLES_PER_TOKEN : b - start * SAMPLES_PER_TOKEN]
            out[i][: got.shape[0]] = got
            out[i][max(0, samples_for_tokens(n) - a):] = 0  # a text that ended before b: silence after its own end
    return out


def _cut(n: int, a: int, b: int, left: int) -> tuple[int, int]:
    """The tokens [first, last) that decode samples [a, b) of a text of n tokens: `left` tokens of context before
    a, HOLD after b where they exist."""
    first = min(max(0, a // SAMPLES_PER_TOKEN - left), n)
    return first, min(n, -(-b // SAMPLES_PER_TOKEN) + HOLD)
