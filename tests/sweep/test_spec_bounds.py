"""Each spec field states its numeric bounds once, in its annotation, and the sentence a broken bound gives is
worded from there: both ends of every bound of SweepSpec and ServeSpec pass at the bound and fail just past it, with
that sentence. (Before, `--repeats 20000` was told "repeats must be at least 1".)"""

import typing
from dataclasses import dataclass, fields, replace
from typing import Annotated

import pytest
from pydantic import Field

from chattts_lab import checks
from bench.serving.spec import ServeSpec
from chattts_lab.options import field_problems, option, rules_of
from chattts_lab.sweep.spec import SweepSpec


def _number_type(annotation):
    """int or float: the number a (possibly listed or optional) field holds; None where it holds none."""
    if annotation in (int, float):
        return annotation
    return next((t for t in map(_number_type, typing.get_args(annotation)) if t), None)


def _ends(cls):
    """(spec class, field, value inside, value just past) for both ends of every numeric bound."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in fields(cls):
        bounds = checks.bounds_of(hints[f.name])
        if not bounds:
            continue
        step = 1 if _number_type(hints[f.name]) is int else 0.5
        listed = isinstance(getattr(cls(), f.name), tuple)
        wrap = (lambda v: (v,)) if listed else (lambda v: v)
        if "ge" in bounds:
            yield pytest.param(cls, f.name, wrap(bounds["ge"]), wrap(bounds["ge"] - step), id=f"{cls.__name__}.{f.name}-low")
        if "gt" in bounds:
            yield pytest.param(cls, f.name, wrap(bounds["gt"] + step), wrap(bounds["gt"]), id=f"{cls.__name__}.{f.name}-low")
        if "le" in bounds:
            yield pytest.param(cls, f.name, wrap(bounds["le"]), wrap(bounds["le"] + step), id=f"{cls.__name__}.{f.name}-high")


ENDS = [*_ends(SweepSpec), *_ends(ServeSpec)]


def test_every_bounded_field_is_checked_at_both_ends():
    ids = {p.id for p in ENDS}
    assert {"SweepSpec.repeats-low", "SweepSpec.repeats-high", "ServeSpec.rates-low", "ServeSpec.rates-high"} <= ids
    assert len(ENDS) >= 40  # 27 bounded fields today, most with two ends


@pytest.mark.parametrize("cls", [SweepSpec, ServeSpec])
def test_the_defaults_break_no_bound(cls):
    assert field_problems(cls()) == []


@pytest.mark.parametrize("cls, name, inside, past", ENDS)
def test_a_bound_holds_at_its_end_and_its_sentence_names_it_just_past(cls, name, inside, past):
    assert field_problems(replace(cls(), **{name: inside})) == []
    got = past[0] if isinstance(past, tuple) else past
    assert field_problems(replace(cls(), **{name: past})) == [rules_of(cls)[name].format(input=got)]


@pytest.mark.parametrize("bounds, sentence", [
    ({"ge": 1, "le": 10_000}, "repeats must be in 1..10000, got {input}"),
    ({"gt": 0, "le": 100}, "repeats must be in (0, 100], got {input}"),
    ({"ge": 0}, "repeats must be 0 or more, got {input}"),
    ({"gt": 0}, "repeats must be positive, got {input}"),
    ({"ge": 2}, "repeats must be at least 2, got {input}"),
    ({"le": 8.5}, "repeats must be at most 8.5, got {input}"),
])
def test_a_bound_is_worded_from_its_numbers(bounds, sentence):
    assert checks.bound_rule("repeats", bounds) == sentence


def test_the_sweep_names_the_upper_bound_it_breaks():
    assert SweepSpec(repeats=20_000).errors()[0] == "repeats must be in 1..10000, got 20000"


def test_a_field_that_words_its_bound_twice_is_refused():
    @dataclass(frozen=True)
    class Twice:
        n: Annotated[int, Field(ge=1, le=8)] = option(1, rule="n must be at least 1, got {input}")

    with pytest.raises(TypeError, match="drop its rule"):
        rules_of(Twice)
