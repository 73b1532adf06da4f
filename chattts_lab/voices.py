"""Voices as data: named presets, portable voice cards, and sentence splitting for long text.

A voice card is a small JSON document holding a speaker embedding (ChatTTS's own string), the seeds
and the sampling parameters that made a voice, so that it reproduces on another machine. Cards come
from users, so they are parsed strictly as data: size-limited, JSON only, known fields only, every
value type- and range-checked by the same rules as a request.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chattts_lab.requests import InvalidRequest, Refine, Sampling, Voice, decode_speaker

CARD_FORMAT = "chattts-lab-voice"
CARD_VERSION = 1
MAX_CARD_BYTES = 256 * 1024  # a card with a sample-audio code is a few kB; anything near this is not a card
MAX_NAME_CHARS = 64

# Named voices are just seeds: ChatTTS draws the same speaker for the same seed (see speaker_from_seed).
PRESET_VOICES: dict[str, int] = {
    "Aria": 2,
    "Bo": 1111,
    "Cleo": 2222,
    "Dax": 4099,
    "Eun": 6653,
    "Finn": 7869,
}


class InvalidVoiceCard(InvalidRequest):
    """A voice card that cannot be read; the message says what is wrong with it."""


@dataclass(frozen=True)
class VoiceCard:
    name: str = "voice"
    speaker: str | None = None  # the embedding: what makes the voice portable
    seed: int | None = None  # the seed the speaker was drawn with, if any (informative)
    sample_audio_code: str | None = None  # a sample-audio voice instead of an embedding
    sample_text: str | None = None
    sampling: Sampling = field(default_factory=Sampling)
    refine: Refine = field(default_factory=Refine)
    speed: int = 5

    @property
    def voice(self) -> Voice:
        """The request voice: the embedding when present (portable), else the sample audio, else the seed."""
        if self.speaker:
            return Voice(speaker=self.speaker)
        if self.sample_audio_code:
            return Voice(sample_audio_code=self.sample_audio_code, sample_text=self.sample_text)
        return Voice(seed=self.seed)

    def to_json(self) -> str:
        body = {"format": CARD_FORMAT, "version": CARD_VERSION, **asdict(self)}
        body["refine"]["break"] = body["refine"].pop("break_")
        return json.dumps(body, ensure_ascii=False, indent=2)


class _Strict(BaseModel):
    """A card's JSON as data: known fields only, each of its own type (no "1" for 1, no true for 1)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class _SamplingFields(_Strict):
    temperature: float = Sampling.temperature
    top_p: float = Sampling.top_p
    top_k: int = Sampling.top_k
    audio_seed: int | None = None
    text_seed: int | None = None


class _RefineFields(_Strict):
    enabled: bool = Refine.enabled
    oral: int = Refine.oral
    laugh: int = Refine.laugh
    break_: int = Field(Refine.break_, alias="break")
    max_new_token: int = Refine.max_new_token


class _CardFields(_Strict):
    format: str
    version: int
    name: str = Field(VoiceCard.name, max_length=MAX_NAME_CHARS)
    speaker: str | None = None
    seed: int | None = None
    sample_audio_code: str | None = None
    sample_text: str | None = None
    sampling: _SamplingFields = _SamplingFields()
    refine: _RefineFields = _RefineFields()
    speed: int = VoiceCard.speed


_WANTED = {"int_type": "an integer", "float_type": "a number", "string_type": "a string", "bool_type": "true or false",
           "model_type": "an object"}


def _card_problem(exc: ValidationError) -> str:
    """pydantic's findings about a card, in the card's words: unknown fields together, else the first wrong type."""
    errors = exc.errors()
    extra = [e["loc"] for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        where = ".".join(map(str, extra[0][:-1]))
        names = ", ".join(str(loc[-1]) for loc in extra if loc[:-1] == extra[0][:-1])
        return f"unknown voice card fields: {names}" if not where else f"unknown fields in voice card {where!r}: {names}"
    err = errors[0]
    key = ".".join(map(str, err["loc"]))
    if err["type"] == "string_too_long":
        return f"voice card field {key!r} is longer than {err['ctx']['max_length']} characters"
    nullable = " or null" if len(err["loc"]) == 1 and _CardFields.model_fields[key].default is None else ""
    return f"voice card field {key!r} must be {_WANTED.get(err['type'], 'valid')}{nullable}, got " \
           f"{type(err['input']).__name__}"


def parse_card(data: str | bytes) -> VoiceCard:
    """Read a voice card from JSON text or bytes, raising InvalidVoiceCard with a clear reason."""
    if isinstance(data, bytes):
        if len(data) > MAX_CARD_BYTES:
            raise InvalidVoiceCard(f"voice card is {len(data):,} bytes; a card is at most {MAX_CARD_BYTES:,}")
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidVoiceCard("voice card is not UTF-8 text (is it a JSON file?)") from exc
    if len(data.encode("utf-8")) > MAX_CARD_BYTES:
        raise InvalidVoiceCard(f"voice card is over {MAX_CARD_BYTES:,} bytes; a card is a few kB")
    try:
        body = json.loads(data)
    except json.JSONDecodeError as exc:
        raise InvalidVoiceCard(f"voice card is not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(body, dict):
        raise InvalidVoiceCard("voice card must be a JSON object")
    if body.get("format") != CARD_FORMAT:
        raise InvalidVoiceCard(f"not a voice card: 'format' must be {CARD_FORMAT!r}")
    if body.get("version") != CARD_VERSION:
        raise InvalidVoiceCard(f"unsupported voice card version {body.get('version')!r}; this app reads {CARD_VERSION}")
    try:
        fields_ = _CardFields.model_validate(body)
    except ValidationError as exc:
        raise InvalidVoiceCard(_card_problem(exc)) from None
    card = VoiceCard(
        name=fields_.name, speaker=fields_.speaker or None, seed=fields_.seed,
        sample_audio_code=fields_.sample_audio_code or None, sample_text=fields_.sample_text or None,
        sampling=Sampling(**fields_.sampling.model_dump()), refine=Refine(**fields_.refine.model_dump()),
        speed=fields_.speed,
    )
    return validate_card(card)


def validate_card(card: VoiceCard) -> VoiceCard:
    """Check a card by the request rules (ranges, speaker decoding); InvalidVoiceCard names the problem."""
    from chattts_lab.requests import SynthesisRequest, validate_request

    if not (card.speaker or card.sample_audio_code or card.seed is not None):
        raise InvalidVoiceCard("voice card holds no voice: give 'speaker', 'sample_audio_code' or 'seed'")
    try:
        if card.speaker:
            decode_speaker(card.speaker)
        validate_request(SynthesisRequest.of("check", voice=card.voice, sampling=card.sampling, refine=card.refine, speed=card.speed))
    except InvalidVoiceCard:
        raise
    except InvalidRequest as exc:
        raise InvalidVoiceCard(f"voice card: {exc}") from exc
    return card


# ----------------------------------------------------------------------------------------------
# A folder of saved cards (the OpenAI-compatible endpoint resolves voice names through it)

SAFE_NAME = re.compile(r"[^\w\-]+", re.UNICODE)


def card_filename(name: str) -> str:
    stem = SAFE_NAME.sub("_", name.strip())[:MAX_NAME_CHARS].strip("_") or "voice"
    return f"{stem}.json"


def save_card(card: VoiceCard, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / card_filename(card.name)
    path.write_text(card.to_json(), encoding="utf-8")
    return path


def load_card(name: str, folder: Path) -> VoiceCard | None:
    """A saved card by name, or None when no such card exists. Never reads outside the folder."""
    path = folder / card_filename(name)
    if not path.is_file():
        return None
    return parse_card(path.read_bytes()[: MAX_CARD_BYTES + 1])


def saved_card_names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def resolve_voice(name: str, folder: Path | None = None) -> VoiceCard:
    """A voice by name: a preset ('Aria'), 'seed:123', a saved card's name, a voice card's JSON text
    or a speaker embedding string. InvalidRequest when it is none of these."""
    text = (name or "").strip()
    if text.startswith("{"):
        return parse_card(text)
    if len(text) > MAX_NAME_CHARS:
        decode_speaker(text)
        return VoiceCard(name="speaker", speaker=text)
    for preset, seed in PRESET_VOICES.items():
        if text.lower() == preset.lower():
            return VoiceCard(name=preset, seed=seed)
    if text.lower().startswith("seed:"):
        try:
            return VoiceCard(name=text, seed=int(text[5:]))
        except ValueError:
            raise InvalidRequest(f"voice {name!r}: after 'seed:' comes a whole number") from None
    card = load_card(text, folder) if folder and text else None
    if card:
        return card
    known = list(PRESET_VOICES) + (saved_card_names(folder) if folder else [])
    raise InvalidRequest(f"unknown voice {name!r}; known voices: {', '.join(known)} or seed:N")


# ----------------------------------------------------------------------------------------------
# Long text

# Sentence ends in Chinese and Latin scripts; the punctuation stays with its sentence.
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;…])\s*|(?<=[.])\s+|\n+")


def split_sentences(text: str, max_chars: int = 120) -> list[str]:
    """Split text into sentences, merging short neighbours up to max_chars so a batch stays small.

    A single sentence longer than max_chars is cut at commas, then hard at max_chars.
    """
    pieces = [p.strip() for p in _SENTENCE_END.split(text or "") if p and p.strip()]
    out: list[str] = []
    for piece in pieces:
        for part in _cut_long(piece, max_chars):
            if out and len(out[-1]) + 1 + len(part) <= max_chars:
                joiner = "" if _is_cjk(out[-1][-1:]) else " "
                out[-1] = f"{out[-1]}{joiner}{part}"
            else:
                out.append(part)
    return out


def _cut_long(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    parts, current = [], ""
    for chunk in re.split(r"(?<=[,，、:：])\s*", sentence):
        while len(chunk) > max_chars:
            if current:
                parts.append(current)
                current = ""
            parts.append(chunk[:max_chars])
            chunk = chunk[max_chars:]
        if len(current) + len(chunk) > max_chars and current:
            parts.append(current)
            current = ""
        current += chunk
    if current:
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _is_cjk(ch: str) -> bool:
    return bool(ch) and ("\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef")
