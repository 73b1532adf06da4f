"""Bundles: a history's sweeps as portable JSON, to compare machines; parsed as data only (its shape:
chattts_lab.history.bundle_schema)."""

from __future__ import annotations

import json
from pathlib import Path

from chattts_lab.history.bundle_schema import bundle_problem
from chattts_lab.history.store import SWEEP_STATUSES, Store, utc_now
from chattts_lab.quality import DELTA_COLUMNS, FIGURE_COLUMNS, QUALITY_TEXT_COLUMNS
from chattts_lab.sweep.results import STATUSES, CellResult

BUNDLE_FORMAT = "chattts-lab-bundle"
BUNDLE_VERSION = 1


class BundleError(ValueError):
    """A bundle file that cannot be imported; the message says what is wrong with it."""


def export_bundle(db_path: str | Path, out_path: str | Path, sweep_ids: list[int] | None = None) -> Path:
    """Write the given sweeps (all when None) with environment, cells, raw samples and fidelity."""
    out_path = Path(out_path)
    with Store(db_path) as store:
        listed = store.sweeps_list()
        ids = [s["id"] for s in listed] if sweep_ids is None else list(sweep_ids)
        by_id = {s["id"]: s for s in listed}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise BundleError(f"no sweep {', '.join(map(str, missing))} in {db_path}")
        sweeps = []
        for sid in ids:
            s = by_id[sid]
            sweeps.append({
                "uuid": s["uuid"], "created_at": s["created_at"], "status": s["status"], "spec": s["spec"],
                "environment": s["environment"], "cells": [r.to_dict() for r in store.results(sid)],
                "fidelity": store.fidelity(sid), "notes": store.notes(sid),
            })
    bundle = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "exported_at": utc_now(), "sweeps": sweeps}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    tmp.write_text(json.dumps(bundle, indent=1))
    tmp.replace(out_path)
    return out_path


def read_bundle(path: str | Path) -> dict:
    """Parse and check a bundle file; raise BundleError with a clear message when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BundleError(f"{path} does not exist") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path} is not a JSON bundle (corrupt or truncated): {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path} is not a ChatTTS Lab bundle (format must be {BUNDLE_FORMAT!r})")
    if data.get("version") != BUNDLE_VERSION:
        raise BundleError(f"{path} is bundle version {data.get('version')!r}; this build reads version {BUNDLE_VERSION}")
    problem = bundle_problem(data)
    if problem:
        raise BundleError(f"{path}: {problem}")
    for n, s in enumerate(data["sweeps"]):
        for m, cell in enumerate(s["cells"]):
            try:
                result = CellResult.from_dict(cell)
                result.row()  # derived columns (the roofline's division) must compute from its numbers
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BundleError(f"{path}: sweep {n}, cell {m} is malformed: {exc}") from exc
            if result.status not in STATUSES:
                raise BundleError(f"{path}: sweep {n}, cell {m} has unknown status {result.status!r}")
            _check_quality(result.quality, f"{path}: sweep {n}, cell {m}")
    return data


def _check_quality(quality: dict, where: str) -> None:
    """Refuse quality columns that plots and the recommendation could not read: figures are numbers, notes text."""
    numbers = (*FIGURE_COLUMNS, *DELTA_COLUMNS, "quality_clips")
    if not isinstance(quality, dict) or not all(
            quality.get(k) is None or isinstance(quality[k], (int, float)) and not isinstance(quality[k], bool)
            for k in numbers) or not all(isinstance(quality.get(k) or "", str) for k in QUALITY_TEXT_COLUMNS):
        raise BundleError(f"{where} has malformed quality columns (figures must be numbers, notes text)")


def import_bundle(db_path: str | Path, bundle_path: str | Path) -> tuple[list[int], list[str]]:
    """Import a bundle's sweeps; returns (new sweep ids, uuids skipped because already present)."""
    data = read_bundle(bundle_path)
    new, skipped = [], []
    with Store(db_path) as store:
        known = {s["uuid"] for s in store.sweeps_list()}
        for s in data["sweeps"]:
            if s["uuid"] in known:
                skipped.append(s["uuid"])
                continue
            status = s.get("status") if s.get("status") in SWEEP_STATUSES else "interrupted"
            status = "interrupted" if status == "running" else status
            sid = store.create_sweep(s["spec"], s["environment"], status=status, origin="imported",
                                     uuid=s["uuid"], created_at=s.get("created_at"))
            for i, cell in enumerate(s["cells"]):
                store.add_cell(sid, i, CellResult.from_dict(cell))
            for f in s["fidelity"]:
                store.add_fidelity(sid, f)
            for key, value in (s.get("notes") or {}).items():
                store.set_note(sid, str(key), value)
            new.append(sid)
    return new, skipped
