"""What one serving benchmark measures (bench.serving.loadtest runs it): load levels, the app's settings, the requests.

Its fields are `python -m bench serve`'s options and the Serving panel's defaults (chattts_lab.options).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Mapping

from pydantic import AfterValidator
from pydantic import Field as Limit

from chattts_lab.sweep import axes
from chattts_lab.sweep.axes import SpecError, bool_list
from chattts_lab.options import build_spec, field_problems, option
from chattts_lab.requests import CONTINUOUS, MAX_BATCH, MAX_NEW_TOKEN, REQUEST_LEVEL, SCHEDULINGS
from chattts_lab.serve.policy import ServingPolicy

TEXTS = (
    "Good morning, and welcome to the lab.",
    "今天天气很好，我们出去走走吧。",
    "Please read the next sentence slowly and clearly.",
    "这个问题其实比看起来要简单得多。",
    "The train to the coast leaves at half past nine.",
    "我最近在学 English，每天练习半个小时。",
    "Thank you for waiting; your order is on its way.",
    "周末我们一起去看电影好不好？",
)

def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecError(f"expected numbers separated by commas, got {text!r}") from None


def _one_on_off(text: str) -> bool:
    values = bool_list(text)
    if len(values) != 1:
        raise SpecError("--stream takes one value here (on or off)")
    return values[0]


def _nonblank_texts(texts: tuple[str, ...]) -> tuple[str, ...]:
    if not texts or not all(t.strip() for t in texts):
        raise ValueError("the text set is empty or holds an empty text")
    return texts


_APP_CHOICE = "the app's {} (default: the app's own choice)"


@dataclass(frozen=True)
class ServeSpec:
    """One serving benchmark. Lists are levels: every `users` (and every `rates`) for every `max_batches`.
    Its fields are `python -m bench serve`'s options and the Serving panel's defaults (see spec.option)."""

    model: str = option("synthetic", "auto, hf, synthetic, synthetic-tiny or a folder", "--model")
    # a running app to measure as it is (its own batching); None: start one per max_batch
    url: str | None = option(None, "measure this running app as it is, instead of starting one per --max-batch",
                             "--url")
    users: tuple[Annotated[int, Limit(ge=1, le=256)], ...] = option(
        (1, 2, 4, 8), "concurrent users per level, closed loop (none when only --rate is given)", "--users",
        axes.int_list)
    requests_per_user: Annotated[int, Limit(ge=1, le=1000)] = option(  # closed loop: one after another
        2, "requests per user, one after another", "--requests", int, what="requests per user")
    rates: tuple[Annotated[float, Limit(gt=0, le=100)], ...] = option(  # open loop: Poisson arrivals ...
        (), "open-loop levels: requests per second (Poisson)", "--rate", _float_list, what="a rate",
        unit="requests/s")
    duration_s: Annotated[float, Limit(ge=1, le=24 * 3600)] = option(  # ... for this long
        30.0, "seconds of each --rate level", "--duration", float, what="duration", unit="s")
    max_batches: tuple[Annotated[int, Limit(ge=0, le=MAX_BATCH)], ...] = option(  # with `url`: (0,), the app's own
        (ServingPolicy.max_batch, 1), "the app's batch limit, one app per value (1: one request at a time, as without batching)",
        "--max-batch", axes.int_list, what="max batch")
    max_wait_ms: Annotated[float, Limit(ge=0, le=600_000)] = option(
        ServingPolicy.max_wait_ms, "the app's wait for company", "--max-wait-ms", float, what="max wait", unit="ms")
    batching: tuple[str, ...] = option(  # one app for continuous, one per max batch for request
        SCHEDULINGS, "continuous (requests join the running generation at the next step; one app, "
        "--max-rows rows) and/or request (request-level batches; one app per --max-batch)", "--batching",
        axes.str_list)
    max_rows: Annotated[int, Limit(ge=1, le=MAX_BATCH)] = option(
        ServingPolicy.max_rows, "continuous batching: rows at once", "--max-rows", int, what="max rows")
    # None: the app's own choice (its recommendation, else the served default: chattts_lab.serve.policy)
    engine: str | None = option(None, _APP_CHOICE.format("engine"), "--engine")
    precision: str | None = option(None, _APP_CHOICE.format("precision"), "--precision")
    device: str | None = option(None, _APP_CHOICE.format("device"), "--device")
    threads: Annotated[int, Limit(ge=1)] | None = option(
        None, "the app's torch threads (default: the usable cores)", "--threads", int)
    # audio tokens per request, exactly (min = max), so every level makes the same audio
    tokens: Annotated[int, Limit(ge=1, le=MAX_NEW_TOKEN)] = option(
        64, "audio tokens per request, exactly", "--tokens", int)
    stream: bool = option(True, "on: streamed responses (time to first audio); off: whole files", "--stream",
                          _one_on_off)
    # vary the requests: every other one the other way (streamed or whole), voices, lengths
    mixed: bool = option(False, "vary the requests (voices, streamed or whole, full or half length), as in a soak "
                                "test", "--mixed", action="store_true")
    texts: Annotated[tuple[str, ...], AfterValidator(_nonblank_texts)] = TEXTS
    ramp_s: Annotated[float, Limit(ge=0, le=3600)] = option(  # closed loop: users start spread over this long
        0.0, what="the ramp", unit="s")
    # capacity (bench.serving.capacity): raise the users until the service level below breaks; users ignored
    capacity: bool = option(False, "raise the users until the service level breaks and report how many real-time "
                                   "streams hold", "--capacity", action="store_true")
    slo_ttfa_p99_s: Annotated[float, Limit(gt=0, le=600)] = option(
        1.0, "capacity's service level: p99 time to first audio at most this many seconds...", "--slo-ttfa-p99",
        float, what="the first-audio limit", unit="s")
    slo_continuity_pct: Annotated[float, Limit(ge=0, le=100)] = option(
        99.0, "...and at least this % of streams with no stall over 100 ms", "--slo-continuity", float,
        what="the continuity limit", unit="%")
    max_users: Annotated[int, Limit(ge=1, le=256)] = option(
        32, "capacity: the most users tried", "--max-users", int, what="max users")
    # capacity: enough streams per level that one stall does not swing the verdict (each user makes several)
    min_streams: Annotated[int, Limit(ge=1, le=1000)] = option(
        20, "capacity: streams measured at each level at least (users x their requests)", "--min-streams", int,
        what="min streams")
    # capacity: the found capacity confirmed by Poisson arrivals (open loop) at a share of it, for this long
    confirm_s: Annotated[float, Limit(ge=0, le=24 * 3600)] = option(
        60.0, "capacity: seconds of Poisson arrivals at --confirm-load % of the streams found, which confirm them "
              "(0: no confirmation)", "--confirm", float, what="the confirmation", unit="s")
    confirm_load_pct: Annotated[float, Limit(gt=0, le=200)] = option(
        80.0, "capacity: the confirmation's load, in % of the streams found", "--confirm-load", float,
        what="the confirmation's load", unit="%")
    kind: str = "serve"

    def validate(self) -> "ServeSpec":
        errors = field_problems(self)
        if not self.users and not self.rates and not self.capacity:
            errors.append("give at least one load level: --users or --rate")
        if self.capacity and not self.stream:
            errors.append("capacity counts real-time streams: it needs streamed requests (--stream on)")
        if not self.url:
            errors += [f"batching must be {' or '.join(SCHEDULINGS)}, got {b!r}" for b in self.batching
                       if b not in SCHEDULINGS]
            if not self.batching:
                errors.append("give at least one --batching")
        if self.url and self.max_batches != (0,):
            errors.append("with --url the running app's own batching is measured: give no --max-batch")
        if not self.url:
            errors += [f"max batch must be in 1..{MAX_BATCH}, got {b}" for b in self.max_batches if b == 0]
            if not self.max_batches:
                errors.append("give at least one --max-batch")
        if errors:
            raise SpecError("; ".join(dict.fromkeys(errors)))
        return self

    @staticmethod
    def from_choices(choices: Mapping[str, Any]) -> "ServeSpec":
        """The one builder of a serving run from the command line's or the panel's choices (see build_spec):
        only --rate levels when --rate is given without --users; with --url, that app's own batching."""
        choices = dict(choices)
        if (choices.get("rates") or choices.get("capacity")) and choices.get("users") is None:
            choices["users"] = ()
        if choices.get("url") and choices.get("max_batches") is None:
            choices["max_batches"] = (0,)
        return build_spec(ServeSpec, choices).validate()

    def apps(self) -> list[tuple[str | None, int]]:
        """(batching, max batch) of each app to start: continuous's max batch is its row count."""
        if self.url:
            return [(None, 0)]
        return ([(CONTINUOUS, self.max_rows)] if CONTINUOUS in self.batching else []) + (
            [(REQUEST_LEVEL, b) for b in self.max_batches] if REQUEST_LEVEL in self.batching else [])

    def levels(self) -> list[dict]:
        return ([{"batching": a, "max_batch": b, "users": u} for a, b in self.apps() for u in self.users]
                + [{"batching": a, "max_batch": b, "rate": r} for a, b in self.apps() for r in self.rates])

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "ServeSpec":
        known = {k: v for k, v in data.items() if k in ServeSpec.__dataclass_fields__}
        known.setdefault("batching", (REQUEST_LEVEL,))  # runs from before continuous batching were request-level
        for name in ("users", "rates", "max_batches", "batching", "texts"):
            known[name] = tuple(known.get(name) or ())
        return ServeSpec(**known)
