"""Field checks by pydantic, in the project's own one-line messages.

A spec, a voice card or a bundle declares its limits as pydantic constraints on its fields
(`Annotated[int, Field(ge=1, le=64)]`); `problems()` validates the data and turns each of pydantic's errors into
the sentence users know ("batch size must be in 1..64, got 0"): the field's `rule`, a format string given the value
it got as `input`. A numeric bound is stated once, in the annotation: `bound_rule` words it from there
(`bounds_of`), so the sentence cannot drift from the limit. A check pydantic cannot declare raises ValueError with
its own sentence (an AfterValidator), which comes through as it is.

    problems(TypeAdapter(Spec), data, {"batches": "batch size must be in 1..64, got {input}"}) -> [sentences]
    bound_rule("batch size", bounds_of(Annotated[int, Field(ge=1, le=64)])) == "batch size must be in 1..64, got {input}"
"""

from __future__ import annotations

import typing
from typing import Any, Mapping

from pydantic import TypeAdapter, ValidationError


class SpecError(ValueError):
    """A specification (a sweep, a serving policy, a cluster to reach) that cannot be run; the message says what to
    change."""

# pydantic's error types that a field's rule describes (its bounds, its pattern, its length)
_RULED = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_pattern_mismatch",
          "string_too_short", "string_too_long", "finite_number", "literal_error"}


BOUNDS = ("ge", "gt", "le", "lt")  # the numeric constraints pydantic's Field takes (annotated_types' Ge, Gt, ...)


def bounds_of(annotation) -> dict[str, Any]:
    """The numeric bounds an annotation declares (`{"ge": 1, "le": 64}`), its items' and its optional's included."""
    found = {}
    for meta in getattr(annotation, "__metadata__", ()):
        for constraint in getattr(meta, "metadata", [meta]):  # a pydantic Field keeps its constraints in .metadata
            found.update({k: getattr(constraint, k) for k in BOUNDS if getattr(constraint, k, None) is not None})
    for inner in typing.get_args(annotation):  # tuple[Annotated[int, ...], ...], X | None, Annotated's own type
        if inner is not Ellipsis and not isinstance(inner, (str, int, float)):
            found.update(bounds_of(inner))
    return found


def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def bound_rule(what: str, bounds: Mapping[str, Any], unit: str = "") -> str:
    """The sentence for a value out of `bounds`, e.g. "repeats must be in 1..10000, got {input}"."""
    unit = f" {unit}" if unit else ""
    low = next(((k, bounds[k]) for k in ("ge", "gt") if k in bounds), None)
    high = next(((k, bounds[k]) for k in ("le", "lt") if k in bounds), None)
    if low and high:
        opening, closing = ("" if low[0] == "ge" else "("), ("" if high[0] == "le" else ")")
        span = (f"{_number(low[1])}..{_number(high[1])}" if not (opening or closing) else
                f"{opening or '['}{_number(low[1])}, {_number(high[1])}{closing or ']'}")
        return f"{what} must be in {span}{unit}, got {{input}}"
    if low:
        if low[1] == 0:
            return f"{what} must be {'0 or more' if low[0] == 'ge' else 'positive'}, got {{input}}"
        return f"{what} must be {'at least' if low[0] == 'ge' else 'above'} {_number(low[1])}{unit}, got {{input}}"
    return f"{what} must be {'at most' if high[0] == 'le' else 'below'} {_number(high[1])}{unit}, got {{input}}"


def validated(adapter: TypeAdapter, data: Any, rules: Mapping[str, str], error: type[Exception]):
    """The validated (and converted) value, or `error` with every problem in one line."""
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise error("; ".join(sentences(exc, rules))) from None


def problems(adapter: TypeAdapter, data: Any, rules: Mapping[str, str]) -> list[str]:
    """Every problem pydantic finds in `data`, as sentences (empty when it validates)."""
    try:
        adapter.validate_python(data)
    except ValidationError as exc:
        return sentences(exc, rules)
    return []


def sentences(exc: ValidationError, rules: Mapping[str, str]) -> list[str]:
    """One sentence per problem; a list whose items break one rule gets one sentence, however many items (a
    range may ask for thousands)."""
    errors, by_rule = [], {}
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] in _RULED and name in rules and len(err["loc"]) == 2:
            by_rule.setdefault(name, []).append(err["input"])
        else:
            errors.append(err)
    said = [sentence(err, rules) for err in errors]
    said += [rules[name].format(input=_some(values)) for name, values in by_rule.items()]
    return list(dict.fromkeys(s for s in said if s))


def _some(values: list) -> str:
    shown = ", ".join(map(str, values[:3]))
    return shown + (f" and {len(values) - 3:,} more" if len(values) > 3 else "")


def sentence(err: dict, rules: Mapping[str, str]) -> str | None:
    """One pydantic error in words: a check's own ValueError, an empty list, the field's rule, else pydantic's.
    None for a list that is short only because its items failed (those items say why)."""
    loc = err["loc"]
    name = str(loc[0]) if loc else ""
    kind = err["type"]
    if kind == "value_error":
        return str(err["ctx"]["error"])
    if kind == "too_short" and len(loc) == 1:
        return None if err["input"] else f"{name} is empty"
    if kind in _RULED and name in rules:
        return rules[name].format(input=err["input"])
    where = ".".join(str(part) for part in loc)
    return f"{where}: {err['msg'][0].lower()}{err['msg'][1:]}, got {err['input']!r}" if where else err["msg"]

