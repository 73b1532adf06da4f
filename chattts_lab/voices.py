"""Voices as data: named presets, portable voice cards, and sentence splitting for long text.

A voice card is a small JSON document holding a speaker embedding (ChatTTS's own string), the seeds
and the sampling parameters that made a voice, so that it reproduces on another machine. Cards come
from users, so they are parsed strictly as data: size-limited, JSON only, known fields only, every
value type- and range-checked by the same rules as a request.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

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


_TOP_FIELDS = {"format", "version", "name", "speaker", "seed", "sample_audio_code", "sample_text", "sampling", "refine", "speed"}


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
    unknown = sorted(set(body) - _TOP_FIELDS)
    if unknown:
        raise InvalidVoiceCard(f"unknown voice card fields: {', '.join(unknown)}")
    card = VoiceCard(
        name=_text(body, "name", "voice", MAX_NAME_CHARS),
        speaker=_optional_text(body, "speaker"),
        seed=_optional_int(body, "seed"),
        sample_audio_code=_optional_text(body, "sample_audio_code"),
        sample_text=_optional_text(body, "sample_text"),
        sampling=_sub(body, "sampling", Sampling, {}),
        refine=_sub(body, "refine", Refine, {"break": "break_"}),
        speed=_int(body, "speed", 5),
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


def _type_error(key: str, want: str, got) -> InvalidVoiceCard:
    return InvalidVoiceCard(f"voice card field {key!r} must be {want}, got {type(got).__name__}")


def _text(body: dict, key: str, default: str, limit: int | None = None) -> str:
    value = body.get(key, default)
    if not isinstance(value, str):
        raise _type_error(key, "a string", value)
    if limit and len(value) > limit:
        raise InvalidVoiceCard(f"voice card field {key!r} is longer than {limit} characters")
    return value


def _optional_text(body: dict, key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise _type_error(key, "a string or null", value)
    return value or None


def _int(body: dict, key: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(key, "an integer", value)
    return value


def _optional_int(body: dict, key: str) -> int | None:
    return None if body.get(key) is None else _int(body, key, 0)


def _sub(body: dict, key: str, cls, renames: dict[str, str]):
    """Build a nested dataclass (Sampling, Refine) from a JSON object, checking each field's type."""
    value = body.get(key, {})
    if not isinstance(value, dict):
        raise _type_error(key, "an object", value)
    value = {renames.get(k, k): v for k, v in value.items()}
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise InvalidVoiceCard(f"unknown fields in voice card {key!r}: {', '.join(unknown)}")
    defaults = cls()
    kwargs = {}
    for name, v in value.items():
        default = getattr(defaults, name)
        ok = (
            v is None and name.endswith("seed")
            or isinstance(default, bool) and isinstance(v, bool)
            or isinstance(default, int) and not isinstance(default, bool) and isinstance(v, int) and not isinstance(v, bool)
            or isinstance(default, float) and isinstance(v, (int, float)) and not isinstance(v, bool)
            or default is None and isinstance(v, int) and not isinstance(v, bool)
        )
        if not ok:
            raise InvalidVoiceCard(f"voice card field '{key}.{name}' has the wrong type ({type(v).__name__})")
        kwargs[name] = float(v) if isinstance(default, float) else v
    return cls(**kwargs)


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
