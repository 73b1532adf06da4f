"""What a user asks for: text, voice, sampling, refinement. Validated without side effects."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_TEXT_CHARS = 5_000  # per request: keeps one request from holding the queue for many minutes
MAX_BATCH = 64
MAX_NEW_TOKEN = 2048
# How a server schedules requests (a served result's Measurements.scheduling, a server's --batching): continuous (rows
# join and leave the running generation per GPT step) or request-level (batches run from start to end).
SCHEDULINGS = CONTINUOUS, REQUEST_LEVEL = ("continuous", "request")
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A text must hold at least one letter or digit in some script to be spoken at all.
SPEAKABLE = re.compile(r"[^\W_]", re.UNICODE)
TAG = re.compile(r"\[[^\]]*\]")


class InvalidRequest(ValueError):
    """A request that cannot be synthesized; the message says what to change."""


@dataclass(frozen=True)
class Voice:
    """Exactly one way to choose a voice; all None means ChatTTS picks a random one."""

    seed: int | None = None  # a random speaker drawn with this seed (the official demo's "audio seed")
    speaker: str | None = None  # a speaker embedding string as ChatTTS encodes it
    sample_audio_code: str | None = None  # a sample-audio voice: the encoded clip...
    sample_text: str | None = None  # ...and its transcript


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.3
    top_p: float = 0.7
    top_k: int = 20
    audio_seed: int | None = None  # fixes the sampling of audio tokens
    text_seed: int | None = None  # fixes the sampling of refined text


@dataclass(frozen=True)
class Refine:
    """Refine text first (ChatTTS's oral/laugh/break prompt); off by default."""

    enabled: bool = False
    oral: int = 2
    laugh: int = 0
    break_: int = 6
    max_new_token: int = 384  # ChatTTS's default cap on refined text tokens

    @property
    def prompt(self) -> str:
        return f"[oral_{self.oral}][laugh_{self.laugh}][break_{self.break_}]"


@dataclass(frozen=True)
class SynthesisRequest:
    texts: tuple[str, ...]
    voice: Voice = field(default_factory=Voice)
    sampling: Sampling = field(default_factory=Sampling)
    refine: Refine = field(default_factory=Refine)
    speed: int = 5  # ChatTTS's [speed_N], 0-9
    max_new_token: int = MAX_NEW_TOKEN
    min_new_token: int = 0
    normalize_text: bool = True

    @staticmethod
    def of(text: str | list[str] | tuple[str, ...], **kwargs) -> "SynthesisRequest":
        texts = (text,) if isinstance(text, str) else tuple(text)
        return SynthesisRequest(texts=texts, **kwargs)


def clean_text(text: str) -> str:
    """Drop control characters and collapse whitespace; the text's meaning is untouched."""
    return " ".join(CONTROL_CHARS.sub(" ", text).split())


def validate_request(req: SynthesisRequest) -> SynthesisRequest:
    """Return the request with cleaned texts, or raise InvalidRequest saying what is wrong."""
    if not req.texts:
        raise InvalidRequest("no text given")
    if len(req.texts) > MAX_BATCH:
        raise InvalidRequest(f"{len(req.texts)} texts in one batch; at most {MAX_BATCH}")
    texts = tuple(clean_text(t if isinstance(t, str) else "") for t in req.texts)
    total = sum(len(t) for t in texts)
    if total > MAX_TEXT_CHARS:
        raise InvalidRequest(f"text is {total:,} characters; at most {MAX_TEXT_CHARS:,} per request")
    for i, t in enumerate(texts):
        label = "text" if len(texts) == 1 else f"text {i + 1}"
        if not t:
            raise InvalidRequest(f"{label} is empty")
        if not SPEAKABLE.search(TAG.sub("", t)):
            raise InvalidRequest(f"{label} has nothing to speak (only spaces, punctuation, symbols or tags)")
    _check_ranges(req)
    _check_voice(req.voice)
    return _replace(req, texts=texts)


def _replace(req: SynthesisRequest, **changes) -> SynthesisRequest:
    from dataclasses import replace

    return replace(req, **changes)


def _check_ranges(req: SynthesisRequest) -> None:
    s, r = req.sampling, req.refine
    checks = [
        (0 < s.temperature <= 2, f"temperature must be in (0, 2], got {s.temperature}"),
        (0 < s.top_p <= 1, f"top-P must be in (0, 1], got {s.top_p}"),
        (1 <= s.top_k <= 626, f"top-K must be in 1..626, got {s.top_k}"),
        (0 <= req.speed <= 9, f"speed must be in 0..9, got {req.speed}"),
        (1 <= req.max_new_token <= MAX_NEW_TOKEN, f"max_new_token must be in 1..{MAX_NEW_TOKEN}, got {req.max_new_token}"),
        (0 <= req.min_new_token <= req.max_new_token, f"min_new_token must be in 0..max_new_token, got {req.min_new_token}"),
        (0 <= r.oral <= 9 and 0 <= r.laugh <= 2 and 0 <= r.break_ <= 7, "refine levels: oral 0-9, laugh 0-2, break 0-7"),
        (1 <= r.max_new_token <= MAX_NEW_TOKEN, f"refine max_new_token must be in 1..{MAX_NEW_TOKEN}"),
    ]
    for seed in (s.audio_seed, s.text_seed):
        checks.append((seed is None or 0 <= seed < 2**32, f"seeds must be in 0..2^32-1, got {seed}"))
    for ok, message in checks:
        if not ok:
            raise InvalidRequest(message)


def _check_voice(voice: Voice) -> None:
    chosen = [voice.seed is not None, voice.speaker is not None, voice.sample_audio_code is not None]
    if sum(chosen) > 1:
        raise InvalidRequest("choose one voice: a seed, a speaker string or a sample-audio voice")
    if voice.seed is not None and not 0 <= voice.seed < 2**32:
        raise InvalidRequest(f"voice seed must be in 0..2^32-1, got {voice.seed}")
    if voice.speaker is not None:
        decode_speaker(voice.speaker)
    if voice.sample_audio_code is not None and not (voice.sample_text or "").strip():
        raise InvalidRequest("a sample-audio voice needs the transcript of its clip")


SPEAKER_DIM = 768
MAX_SPEAKER_CHARS = 4_000


def decode_speaker(text: str):
    """Decode a speaker embedding string, raising InvalidRequest when it is malformed or truncated."""
    import numpy as np
    from ChatTTS.model.speaker import Speaker

    text = (text or "").strip()
    if not text:
        raise InvalidRequest("speaker string is empty")
    if len(text) > MAX_SPEAKER_CHARS:
        raise InvalidRequest(f"speaker string is {len(text):,} characters; a real one is under {MAX_SPEAKER_CHARS:,}")
    try:
        values = Speaker._decode(text)
    except Exception as exc:  # lzma/base16384 raise several types for garbage
        raise InvalidRequest("speaker string is malformed or truncated: copy the whole string again (from \"Show "
                             "the speaker string\" or a voice card)") from exc
    if values.shape != (SPEAKER_DIM,) or not np.isfinite(values).all():
        raise InvalidRequest(f"speaker string decodes to {values.size} values; a ChatTTS speaker has {SPEAKER_DIM}")
    return values
