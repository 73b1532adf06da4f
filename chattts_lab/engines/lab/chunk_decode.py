"""A stream's chunks decoded from each row's carried state: ChatTTS's mel decoder, Vocos and its ISTFT compute each
frame once, instead of re-decoding context before every chunk.

Every layer of the decoder and vocoder that mixes frames is a 'same'-padded convolution (the decoder's input and
output convolutions and 12 dilated depthwise ones, Vocos's embedding and 8 depthwise ones) or the ISTFT's
overlap-add. A row's `ChunkState` keeps, for each convolution, the input frames just before its boundary as that
layer saw them, and the complex spectra of the last frames before it. The next chunk computes the frames from the
boundary to its last token plus HOLD (held-back tokens, computed again next time with their right context), with
each convolution reading the kept frames where the whole decode reads earlier frames and zeros where it would read
past the row's end. So a chunk costs its new tokens and HOLD, not LEFT_CONTEXT more: a shared decode of 8 rows'
12-token chunks took 79 ms with 8 tokens of context decoded again and 61 ms carrying the frames (lab int4, Zen 4,
2 threads; scripts/probes/chunk_decode_cost.py, docs/measurements/2026-12-05-carried-decode.md).

What it changes in the audio: the kept frames were computed while the row's right context ended HOLD tokens after
them, as the re-decoded context was computed with its left context cut; both differ from the whole decode within
stream.SEAM_BOUND (measured in that note; held by tests/engines/test_chunk_decode.py and
tests/serve/test_continuous.py). A chunk that continues no state
(none kept, or its start is not where the state ends) starts afresh LEFT_CONTEXT tokens before its first sample,
with zeros before that: what every chunk did before this module.

Rows of one call are each computed as if alone (the frames past a row's own end are zeroed before every
convolution, as that convolution's own padding, and a row's ISTFT envelope counts only its own frames), so rows of
any widths and any starts share one call.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from chattts_lab.engines.lab.time_major import by_phase, convnext_blocks
from chattts_lab.metrics import SAMPLES_PER_STEP_PAIR as HOP, SAMPLES_PER_TOKEN, samples_for_tokens

FRAMES_PER_TOKEN = SAMPLES_PER_TOKEN // HOP  # 2 mel frames a token
# Vocos's ISTFT: a sample hears the frames whose 1024-sample windows cover it, at most 2 before its token's first frame
SPECTRA_KEPT = 3


@dataclass
class ChunkState:
    """What a row's next chunk continues from: the frames before `frame` are done."""

    sample: int  # where the next chunk starts (the last chunk's end)
    frame: int  # the first frame the next chunk computes
    inputs: list[torch.Tensor]  # per convolution, in call order: its input frames [frame - p, frame), (p, channels)
    spectra: torch.Tensor  # (SPECTRA_KEPT, bins) complex: the ISTFT's input frames [frame - SPECTRA_KEPT, frame)
    first_spectrum: int  # the first frame whose spectrum exists (0, or where a fresh start began)


def decode_chunks(chat, spans: list[tuple], left: int, hold: int,
                  recorder=None) -> list[tuple[np.ndarray, ChunkState | None]]:
    """Samples [a, b) of each (hiddens, tokens, a, b, state or None), in one call of the decoder and vocoder, and
    each row's state for a chunk from b on. `left`: tokens decoded before a where the span continues no state;
    `hold`: tokens after b decoded for their right context (where they exist). `recorder` (a call's
    trackers.stages.StageRecorder, or None) is told the decoder's and vocoder's times."""
    rows = [_RowCall(h, n, a, b, state, left, hold) for h, n, a, b, state in spans]
    if all(r.end == r.start for r in rows):  # every text ended before these samples: silence, nothing to continue
        return [(np.zeros(r.b - r.a, dtype=np.float32), None) for r in rows]
    timed = recorder.timed if recorder is not None else lambda stage: nullcontext()
    istft = chat.vocos.head.istft
    with torch.inference_mode():
        call = _Call(rows)
        with timed("decoder_s"):
            mel = _mel(chat, call)
        with timed("vocoder_s"):
            spectra = _spectra(chat, call, mel)
            audio = _istft(istft.window, call, spectra)
    trim = istft.win_length // 2 if istft.padding == "center" else (istft.win_length - HOP) // 2  # as Vocos trims
    return [(row.samples(audio[i], trim), row.next_state(call.kept[i], spectra[i])) for i, row in enumerate(rows)]


class _RowCall:
    """One row's part of a call: it computes frames [start, end); the next chunk's state keeps frames before `keep`."""

    def __init__(self, hiddens, n: int, a: int, b: int, state: ChunkState | None, left: int, hold: int):
        self.hiddens, self.n, self.a, self.b = hiddens, n, a, b
        self.state = state if state is not None and state.sample == a else None
        fresh = FRAMES_PER_TOKEN * min(max(0, a // SAMPLES_PER_TOKEN - left), n)
        self.start = self.state.frame if self.state else fresh
        self.end = max(self.start, FRAMES_PER_TOKEN * min(n, -(-b // SAMPLES_PER_TOKEN) + hold))
        # the next chunk recomputes nothing before b that this one computed (left applies to fresh starts only)
        self.keep = min(max(self.start, FRAMES_PER_TOKEN * (b // SAMPLES_PER_TOKEN)), self.end)
        self.first_spectrum = self.state.first_spectrum if self.state else self.start

    def frames(self, dtype) -> torch.Tensor:
        """Its new tokens' GPT hidden states as decoder frames (time-major): token t is frames 2t and 2t+1, the
        first and second halves of its channels, as DVAE.forward views them."""
        tokens = self.hiddens[self.start // FRAMES_PER_TOKEN : self.end // FRAMES_PER_TOKEN]
        return tokens.reshape(-1, tokens.shape[1] // FRAMES_PER_TOKEN).to(dtype)

    def samples(self, audio: torch.Tensor, trim: int) -> np.ndarray:
        """Its samples [a, b) from its row of the call's audio, which starts with the window of the frame
        SPECTRA_KEPT before `start`; Vocos's ISTFT drops the first `trim` samples of a whole decode (half a window,
        as ChatTTS configures it: 'center'); zero past its text's end."""
        origin = HOP * (self.start - SPECTRA_KEPT) - trim
        out = np.zeros(self.b - self.a, dtype=np.float32)
        got = audio[self.a - origin : self.b - origin].float().cpu().numpy()
        out[: got.shape[0]] = got
        out[max(0, samples_for_tokens(self.n) - self.a):] = 0
        return out

    def next_state(self, kept: list[torch.Tensor], spectra: torch.Tensor) -> ChunkState:
        at = self.keep - self.start + SPECTRA_KEPT  # frame `keep` in the call's spectra, which start SPECTRA_KEPT early
        return ChunkState(self.b, self.keep, kept, spectra[at - SPECTRA_KEPT : at].clone(),
                          self.first_spectrum)


class _Call:
    """The rows of one call, padded to the widest: each row's frames [start, end) at positions 0..width-1."""

    def __init__(self, rows: list[_RowCall]):
        self.rows = rows
        counts = [r.end - r.start for r in rows]
        self.width = max(counts)
        # (B, width, 1): 1 for each row's own frames; None where every row fills the width
        self.valid = None if min(counts) == self.width else (
            (torch.arange(self.width)[None, :] < torch.tensor(counts)[:, None]).float()[..., None])
        self.keep_at = [r.keep - r.start for r in rows]
        self.kept: list[list[torch.Tensor]] = [[] for _ in rows]
        self.site = 0  # the convolution being run, in call order (its index in a state's `inputs`)

    def own_frames(self, x: torch.Tensor) -> torch.Tensor:
        """x with every frame past its row's end zeroed."""
        return x if self.valid is None else x * self.valid.to(x)

    def padded_input(self, x: torch.Tensor, p: int) -> torch.Tensor:
        """A convolution's input for new frames x (B, width, C): each row's p frames before its start (kept from
        its last chunk, or zeros), its new frames (zero past its end), p zeros; (B, p + width + p, C). Keeps each
        row's frames [keep - p, keep) for its next chunk."""
        b, _, c = x.shape
        if any(r.state for r in self.rows):
            before = torch.stack([r.state.inputs[self.site].to(x) if r.state else x.new_zeros(p, c)
                                  for r in self.rows])
        else:
            before = x.new_zeros(b, p, c)
        full = torch.cat([before, self.own_frames(x), x.new_zeros(b, p, c)], 1)
        if len(set(self.keep_at)) == 1:  # frame keep - p sits at keep - start in `full`
            kept = full.narrow(1, self.keep_at[0], p).clone()
        else:
            at = torch.tensor(self.keep_at, device=x.device)[:, None] + torch.arange(p, device=x.device)[None, :]
            kept = full[torch.arange(b, device=x.device)[:, None], at]
        for i in range(b):
            self.kept[i].append(kept[i])
        self.site += 1
        return full

    def conv(self, x: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
        """A 'same'-padded Conv1d on time-major new frames: (B, width, C) -> (B, width, C_out)."""
        full = self.padded_input(x, conv.padding[0])
        return F.conv1d(full.transpose(1, 2), conv.weight, conv.bias).transpose(1, 2)

    def depthwise(self, x: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
        """A 'same'-padded depthwise Conv1d on time-major new frames, by phase as time_major runs the dilated ones,
        on the padded input with no padding of its own (whole tokens of 2 frames and p = 6: a multiple of dilation 2)."""
        return by_phase(self.padded_input(x, conv.padding[0]), conv, 0)


def _mel(chat, call: _Call) -> torch.Tensor:
    """The mel decoder (`chat.decoder`, a DVAE without quantizer) on the call's new frames: (B, width, 100)."""
    dvae = chat.decoder
    decoder = dvae.decoder
    weight = decoder.conv_in[0].weight
    x = torch.nn.utils.rnn.pad_sequence([r.frames(weight.dtype) for r in call.rows], batch_first=True).to(weight.device)
    x = call.conv(x, decoder.conv_in[0])
    x = call.conv(decoder.conv_in[1](x), decoder.conv_in[2])
    x = convnext_blocks(decoder.decoder_block, x.contiguous(), call.depthwise)
    x = F.linear(x, decoder.conv_out.weight.squeeze(-1))  # the 1x1 output convolution
    return call.conv(x, dvae.out_conv) * dvae.coef.view(1, 1, -1)


def _spectra(chat, call: _Call, mel: torch.Tensor) -> torch.Tensor:
    """Vocos's backbone and head on the new frames, each row's kept spectra before them: (B, SPECTRA_KEPT + width,
    bins) complex."""
    backbone, head = chat.vocos.backbone, chat.vocos.head
    x = backbone.norm(call.conv(mel, backbone.embed))
    x = backbone.final_layer_norm(convnext_blocks(backbone.convnext, x.contiguous(), call.depthwise))
    mag, phase = head.out(x).float().chunk(2, dim=-1)
    spectra = torch.clip(torch.exp(mag), max=1e2) * torch.polar(torch.ones_like(phase), phase)  # as ISTFTHead
    before = torch.stack([r.state.spectra.to(spectra) if r.state else spectra.new_zeros(SPECTRA_KEPT, spectra.shape[2])
                          for r in call.rows])
    return torch.cat([before, call.own_frames(spectra)], 1)


def _istft(window: torch.Tensor, call: _Call, spectra: torch.Tensor) -> torch.Tensor:
    """Vocos's ISTFT (torch.istft's arithmetic: inverse FFT, window, overlap-add, divided by the summed squared
    windows) of each row's spectra, over the frames that exist for it (its kept spectra
    from `first_spectrum` on, its new frames to its end): (B, samples), starting at its first spectrum's window."""
    if spectra.device.type in ("mps", "npu"):  # as ChatTTS's `_vocos_decode`: the FFT runs on the CPU there
        spectra = spectra.cpu()
    window = window.to(spectra.device, torch.float32)
    win, frames = window.shape[0], spectra.shape[1]
    exists = torch.stack([_frames_that_exist(r, frames) for r in call.rows]).to(spectra.device)  # (B, frames)
    waves = torch.fft.irfft(spectra, win, dim=-1, norm="backward") * window  # (B, frames, win)
    length = (frames - 1) * HOP + win
    fold = lambda columns: F.fold(columns.transpose(1, 2), (1, length), (1, win), stride=(1, HOP))[:, 0, 0]
    audio = fold(waves * exists[..., None])
    envelope = fold(window.square().expand(len(call.rows), frames, win) * exists[..., None])
    return torch.where(envelope > 1e-11, audio / envelope.clamp_min(1e-11), torch.zeros_like(audio))


def _frames_that_exist(row: _RowCall, frames: int) -> torch.Tensor:
    """Which of the call's frames (SPECTRA_KEPT before the row's start, then its new ones) the row's whole decode
    has: from its first spectrum to its end."""
    index = torch.arange(frames) + row.start - SPECTRA_KEPT
    return ((index >= row.first_spectrum) & (index < row.end)).float()
