"""Spec fields that describe themselves, and the one builder that reads them.

A spec (chattts_lab.sweep.spec.SweepSpec, bench.serving.spec.ServeSpec, chattts_lab.serve.policy.ServingPolicy) is a frozen dataclass whose fields carry their
default, their limits (pydantic constraints in the annotation), the sentence a broken limit gives (numeric bounds:
worded from the annotation itself, naming the field as `what`; other limits: `rule`, see chattts_lab.checks) and
the command-line option they are (flag, help, parser). The command lines' argparse (`add_spec_options`: `python -m
bench`, `python app.py`, `python -m chattts_lab.serve.rayserve`), the app's forms and `build_spec` all read them, so
each default and each limit is written once.

    build_spec(SweepSpec, {"batches": "1-8*2", "repeats": 2.0})   # from argparse's namespace or a form's values
    spec_argv(spec) == ["--batch", "1,2,4,8", "--repeats", "2"]      # the command line that gives it back
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import MISSING, Field, field, fields
from functools import cache
from typing import Any, Callable, Mapping, get_type_hints

from pydantic import TypeAdapter

from chattts_lab import checks
from chattts_lab.checks import SpecError


def option(default: Any = MISSING, help: str = "", flag: str | None = None, parse: Callable | None = None,
           rule: str | None = None, group: str = "measurement", factory: Callable | None = None,
           what: str | None = None, unit: str = "", **argparse_kw):
    """A spec field with what its command-line option needs; `factory` for a default computed on this machine.
    `what` and `unit` word a numeric bound's sentence ("batch size must be in 1..64"; default: the field's name);
    `rule` is for the other limits (a pattern), whose sentence the annotation cannot give."""
    meta = {"help": help, "flag": flag, "parse": parse, "rule": rule, "group": group, "argparse": argparse_kw,
            "what": what, "unit": unit}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@cache
def _adapter(cls) -> TypeAdapter:
    return TypeAdapter(cls)


@cache
def rules_of(cls) -> dict[str, str]:
    """Each field's sentence for a broken limit: its numeric bounds worded from its annotation, else its `rule`."""
    hints, rules = get_type_hints(cls, include_extras=True), {}
    for f in fields(cls):
        bounds = checks.bounds_of(hints[f.name])
        if bounds and f.metadata.get("rule"):  # the bound would be stated twice, and drift (issue 42)
            raise TypeError(f"{cls.__name__}.{f.name}: its bounds are worded from its annotation; drop its rule")
        if bounds:
            rules[f.name] = checks.bound_rule(f.metadata.get("what") or f.name, bounds, f.metadata.get("unit", ""))
        elif f.metadata.get("rule"):
            rules[f.name] = f.metadata["rule"]
    return rules


def field_problems(spec) -> list[str]:
    """What pydantic finds wrong with a spec's fields, in each field's own words."""
    return checks.problems(_adapter(type(spec)), {f.name: getattr(spec, f.name) for f in fields(spec)},
                           rules_of(type(spec)))


def build_spec(cls, choices: Mapping[str, Any]):
    """A spec of `cls` from choices by field name, as `python -m bench` (argparse's namespace) or a form gives
    them: text is read by the field's own parser (the command line's list and range syntax), a choice that is
    absent or blank text takes the field's default (None only where the default is None), and numbers are converted (2.0 -> 2) by pydantic. Each
    field is validated (SpecError names every problem); the checks across fields are the spec's validate()."""
    given = {}
    for f in fields(cls):
        value = choices.get(f.name)
        if value is None and f.name in choices and f.default not in (None, MISSING):
            raise SpecError(f"{f.name} needs a value")  # an emptied number box is a mistake, not the default
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        given[f.name] = _parsed(f, value)
    return checks.validated(_adapter(cls), given, rules_of(cls), SpecError)


def _parsed(f: Field, value):
    parse = f.metadata.get("parse")
    if parse is None:
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        value = ",".join(value)  # a form's checkbox group: the choices it ticked
    if not isinstance(value, str):
        return value
    try:
        return parse(value)
    except ValueError as exc:  # SpecError is one: the list syntax's own sentence
        raise SpecError(str(exc) if isinstance(exc, SpecError) else f"{f.name}: {exc}") from None


def defaults(cls) -> dict[str, Any]:
    """Each field's default (computed ones computed now)."""
    return {f.name: getattr(cls(), f.name) for f in fields(cls)}


def as_text(value) -> str:
    """A value as the command line and the forms write it: comma lists, on/off, 1.5 rather than 1.5000."""
    if isinstance(value, (list, tuple)):
        return ",".join(as_text(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def spec_argv(spec) -> list[str]:
    """The command-line options that give this spec: every field with a flag whose value is not its default."""
    base = defaults(type(spec))
    argv = []
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.metadata.get("flag") and value != base[f.name] and value not in (None, ()):
            argv += [f.metadata["flag"], as_text(value)]
    return argv


def argparse_type(parse):
    """A library list parser as an argparse type: its SpecError becomes argparse's own usage error."""
    @functools.wraps(parse)
    def typed(text: str):
        try:
            return parse(text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return typed


def add_spec_options(group, spec_cls, name: str) -> None:
    """One option per field of `spec_cls` in its group `name`: flag, parser, help and default from the field. An
    option left out is absent from the namespace, so the spec's own default applies (see build_spec)."""
    shown = defaults(spec_cls)
    for f in fields(spec_cls):
        meta = f.metadata
        if meta.get("flag") and meta["group"] == name:
            default = as_text(shown[f.name]) if shown[f.name] not in (None, ()) else "none"
            said = meta["help"] if "(default" in meta["help"] else f"{meta['help']} (default: {default})"
            shape = {"metavar": meta["flag"].lstrip("-").upper().replace("-", "_")}
            if meta["parse"]:
                shape["type"] = argparse_type(meta["parse"])
            if meta["argparse"].get("action"):  # a switch: no value, so neither a metavar nor a type
                shape = {}
            group.add_argument(meta["flag"], dest=f.name, default=argparse.SUPPRESS, help=said.replace("%", "%%"),
                               **{**shape, **meta["argparse"]})
