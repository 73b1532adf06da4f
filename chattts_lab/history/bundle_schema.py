"""The shape of a bundle (chattts_lab.history.bundle's portable JSON), checked by pydantic before anything is imported.

A bundle is someone else's file: what tables, plots and reports read from it must have the type they read, so a
crafted one is refused here rather than crash a report later (any text in it is fine: reports escape it). Keys this
build does not read travel along untouched. Cells are checked by CellResult.from_dict, their own reader.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError

Number = StrictInt | StrictFloat


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")  # keys this build does not read travel along untouched


class _Cpu(_Open):
    flags: list[StrictStr] | None = None


class _Gpu(_Open):
    name: Any


class _Environment(_Open):
    cpu: _Cpu | None = None
    versions: dict | None = None
    blas: dict | None = None
    git: dict | None = None
    gpus: list[_Gpu] | None = None
    mem_read_gbps: dict[str, Number] | None = None
    mem_read_method: dict | None = None
    mem_read_gbps_reads: dict | None = None
    mem_read_before: StrictStr | None = None
    mem_read_s: list[Number] | None = None


class _ServingLevel(_Open):  # what plots and tables read from a serving run's levels: numbers where present
    max_batch: Number | None = None
    users: Number | None = None
    rate: Number | None = None
    requests: Number | None = None
    ok: Number | None = None
    errors: Number | None = None
    lost: Number | None = None
    audio_s_per_s: Number | None = None
    latency_p90_s: Number | None = None
    ttfa_p90_s: Number | None = None
    queue_p90_s: Number | None = None
    continuity_pct: Number | None = None
    stall_worst_p90_s: Number | None = None
    stall_total_p90_s: Number | None = None


class _Serving(_Open):
    levels: list[_ServingLevel] = []
    requests: list = []


class _Price(_Open):  # chattts_lab.history.price: what tables divide by
    usd_per_hour: Number
    source: StrictStr


class _Notes(_Open):
    serving: _Serving | None = None
    price: _Price | None = None


class _Fidelity(_Open):
    device: StrictStr
    engine: StrictStr
    precision: StrictStr


class _BundleSweep(_Open):
    uuid: StrictStr
    spec: dict
    environment: _Environment
    cells: list
    fidelity: list[_Fidelity]
    notes: _Notes = _Notes()


class _Bundle(_Open):
    sweeps: list[_BundleSweep]


_KINDS = {"uuid": "str", "spec": "dict", "environment": "dict", "cells": "list", "fidelity": "list"}


def bundle_problem(data: dict) -> str | None:
    """What is malformed in a bundle's sweeps (None when every part reports read has its type)."""
    try:
        _Bundle.model_validate(data)
    except ValidationError as exc:
        return _problem(exc.errors()[0])
    return None


def _problem(err: dict) -> str:
    """The first thing pydantic found wrong with a bundle, said as what part of it is malformed."""
    loc = err["loc"]
    if len(loc) < 2:
        return "'sweeps' must be a list"
    where, part, rest = f"sweep {loc[1]}", (loc[2:3] or ("",))[0], loc[3:]
    if not part:
        return f"{where} is not an object"
    if part == "environment" and rest:
        return f"{where}: 'environment' is malformed ({'.'.join(map(str, rest))}: {err['msg'].lower()})"
    if part == "fidelity" and rest:
        return f"{where}: a fidelity record is malformed"
    if part == "notes":
        if rest[:1] == ("price",):
            return f"{where}: the price note must hold a number 'usd_per_hour' and a text 'source'"
        if "levels" in rest and len(rest) > 2:
            return f"{where}: a serving level is malformed (its counts and times must be numbers)"
        if rest:
            return f"{where}: the serving note must hold lists 'levels' and 'requests'"
        return f"{where}: 'notes' must be an object"
    return f"{where}: {part!r} is missing or not a {_KINDS.get(part, 'valid value')}"
