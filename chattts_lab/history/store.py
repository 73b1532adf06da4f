"""Every sweep and every cell, kept in one SQLite file; portable JSON bundles to compare machines.

Each cell is committed the moment it finishes, so a crash or an interrupt loses nothing already
measured. The database runs in WAL mode with a busy timeout so a sweep and a reader (the app, a
second sweep) can share it. A sweep left `running` by a process that no longer exists is marked
`interrupted` the next time the store is opened; `--resume` finishes it.

Tables: meta (schema version), sweeps (spec, environment, status), cells (one canonical row per cell,
plus the full result as JSON), samples (raw per-call measurements), fidelity (drift per precision).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid as uuidlib
from datetime import datetime, timezone
from pathlib import Path

import psutil

from chattts_lab.history.bundle_schema import bundle_problem
from chattts_lab.trackers.env import summary
from chattts_lab.quality import DELTA_COLUMNS, FIGURE_COLUMNS, QUALITY_COLUMNS, QUALITY_TEXT_COLUMNS
from chattts_lab.sweep.results import CANONICAL_COLUMNS, STATUSES, CellResult

log = logging.getLogger(__name__)

# Schema history: 1 = first release; 2 = cells.memory_budget_mb; 3 = cells.traceback; 4 = cells.weight_mb_per_step,
# mem_read_gbps, floor_step_ms, roofline (the step's floor at the machine's read bandwidth); 5 = cells.cpu_share and
# cells.passes, table sweep_notes (the interleaving plan and each pass's order). Files are kept across releases,
# so upgrades add the canonical columns and tables an older file lacks (see Store._migrate), by name rather than
# by number: a development build wrote 4 for the version-5 additions alone, and that file upgrades too. A newer
# file than this build knows is refused rather than misread. 6 = cells.node, node_id, node_machine and
# node_fingerprint (where a cluster sweep ran each cell, chattts_lab.sweep.cluster), and cells.kernels (which kernels
# the GPT step ran, from the effective settings). 7 = the quality columns (chattts_lab.quality.QUALITY_COLUMNS: each
# cell's configuration scored beside stock fp32; NULL in older rows, which read as "quality not measured").
SCHEMA_VERSION = 7
SWEEP_STATUSES = ("running", "finished", "interrupted", "cancelled")
BUNDLE_FORMAT = "chattts-lab-bundle"
BUNDLE_VERSION = 1
DEFAULT_DB = Path("results") / "lab.sqlite"
_TEXT_COLUMNS = {"device", "precision", "engine", "status", "reason", "model", "device_effective", "dtype_gpt",
                 "kernels", "traceback", "node", "node_id", "node_machine", "node_fingerprint", *QUALITY_TEXT_COLUMNS}
_INT_COLUMNS = {"batch_size", "threads", "tokens", "compile", "stream", "repeats", "threads_effective",
                "compile_effective", "passes", "quality_clips"}


class StoreError(RuntimeError):
    """The database cannot be used (newer schema, not a lab database); the message says why."""


class BundleError(ValueError):
    """A bundle file that cannot be imported; the message says what is wrong with it."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _column_type(name: str) -> str:
    return "TEXT" if name in _TEXT_COLUMNS else "INTEGER" if name in _INT_COLUMNS else "REAL"


def _schema() -> str:
    cols = ",\n  ".join(f'"{c}" {_column_type(c)}' for c in CANONICAL_COLUMNS if c != "status")
    return f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  uuid TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  status TEXT NOT NULL,
  origin TEXT NOT NULL DEFAULT 'local',
  host TEXT, pid INTEGER, pid_started REAL,
  machine TEXT,
  spec_json TEXT NOT NULL,
  env_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cells (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  cell_key TEXT NOT NULL,
  finished_at TEXT NOT NULL,
  status TEXT NOT NULL,
  {cols},
  result_json TEXT NOT NULL,
  UNIQUE (sweep_id, cell_key)
);
CREATE TABLE IF NOT EXISTS samples (
  cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  phase TEXT NOT NULL,
  wall_s REAL,
  data_json TEXT NOT NULL,
  PRIMARY KEY (cell_id, seq)
);
CREATE TABLE IF NOT EXISTS fidelity (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  device TEXT NOT NULL, engine TEXT NOT NULL, precision TEXT NOT NULL,
  status TEXT NOT NULL,
  record_json TEXT NOT NULL,
  UNIQUE (sweep_id, device, engine, precision)
);
CREATE TABLE IF NOT EXISTS sweep_notes (
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value_json TEXT NOT NULL,
  PRIMARY KEY (sweep_id, key)
);
"""


def _process_started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class Store:
    """One open database. Thread-safe (one lock); each write is its own committed transaction."""

    def __init__(self, path: str | Path = DEFAULT_DB, timeout_s: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.conn = sqlite3.connect(str(self.path), timeout=timeout_s, check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._prepare(time.monotonic() + timeout_s)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            if "locked" in str(exc):  # a readable database another process kept locked past the timeout
                raise StoreError(f"{self.path} stayed locked by another process for {timeout_s:g} s: {exc}") from exc
            raise StoreError(f"{self.path} is not a ChatTTS Lab database: {exc}") from exc
        self.mark_dead_sweeps()

    def _prepare(self, deadline: float) -> None:
        """WAL mode and the schema, tried again while another opener holds the lock they need: where waiting
        could deadlock (two openers of an old file, each wanting the other's lock), SQLite answers `database is
        locked` at once instead of using the busy timeout."""
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode = WAL")
                self.conn.execute("PRAGMA foreign_keys = ON")
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _migrate(self) -> None:
        with self._lock:
            # BEGIN IMMEDIATE takes the write lock first, so two processes opening an old file at once
            # upgrade it one after the other (the second finds it done) instead of racing.
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else None
                if version is not None and version > SCHEMA_VERSION:
                    raise StoreError(f"{self.path} has schema version {version}; this build knows up to {SCHEMA_VERSION}")
                for statement in _schema().split(";"):  # executescript would commit mid-transaction
                    if statement.strip():
                        self.conn.execute(statement)
                self._add_missing_columns(version)
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise

    def _add_missing_columns(self, version: int | None) -> None:
        """Upgrade an older file in place: every canonical column it lacks is added (NULL in old rows)."""
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(cells)")}
        missing = [c for c in CANONICAL_COLUMNS if c not in have and c != "status"]
        for c in missing:
            self.conn.execute(f'ALTER TABLE cells ADD COLUMN "{c}" {_column_type(c)}')
        if version is not None and version < SCHEMA_VERSION:
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('upgraded_from', ?)", (str(version),))
            log.warning("%s: schema upgraded from version %d to %d (added %s)", self.path, version, SCHEMA_VERSION,
                        ", ".join(missing) or "nothing")

    def mark_dead_sweeps(self) -> list[int]:
        """Sweeps left `running` by a process of this host that is gone become `interrupted`."""
        host = socket.gethostname()
        dead = []
        with self._lock:
            for r in self.conn.execute("SELECT id, host, pid, pid_started FROM sweeps WHERE status = 'running'"):
                if r["host"] != host:
                    continue  # another machine sharing the file: cannot tell
                started = _process_started(r["pid"]) if r["pid"] else None
                if started is None or (r["pid_started"] and abs(started - r["pid_started"]) > 1.0):
                    dead.append(r["id"])
            if dead:
                with self.conn:
                    self.conn.executemany("UPDATE sweeps SET status = 'interrupted', updated_at = ? WHERE id = ?",
                                          [(_now(), i) for i in dead])
        for i in dead:
            log.warning("sweep %d was left running by a process that is gone: marked interrupted", i)
        return dead

    # -- writing ---------------------------------------------------------------------------------

    def create_sweep(self, spec: dict, environment: dict, status: str = "running", origin: str = "local",
                     uuid: str | None = None, created_at: str | None = None) -> int:
        pid = os.getpid()
        with self._lock, self.conn:
            cur = self.conn.execute(
                "INSERT INTO sweeps (uuid, created_at, updated_at, status, origin, host, pid, pid_started, machine,"
                " spec_json, env_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (uuid or uuidlib.uuid4().hex, created_at or _now(), _now(), status, origin,
                 socket.gethostname() if origin == "local" else environment.get("hostname"),
                 pid if origin == "local" else None, _process_started(pid) if origin == "local" else None,
                 summary(environment), json.dumps(spec), json.dumps(environment)),
            )
            return int(cur.lastrowid)

    def update_environment(self, sweep_id: int, environment: dict) -> None:
        """Replace a sweep's environment (a sweep adds a bandwidth read before each pass, or each cell of one pass)."""
        with self._lock, self.conn:
            self.conn.execute("UPDATE sweeps SET env_json = ?, machine = ?, updated_at = ? WHERE id = ?",
                              (json.dumps(environment), summary(environment), _now(), sweep_id))

    def set_status(self, sweep_id: int, status: str) -> None:
        if status not in SWEEP_STATUSES:
            raise ValueError(f"unknown sweep status {status!r}")
        pid = os.getpid()
        with self._lock, self.conn:
            self.conn.execute(
                "UPDATE sweeps SET status = ?, updated_at = ?, host = ?, pid = ?, pid_started = ? WHERE id = ?",
                (status, _now(), socket.gethostname(), pid, _process_started(pid), sweep_id))

    def add_cell(self, sweep_id: int, index: int, result: CellResult) -> int:
        """Insert (or replace, on resume) one cell with its raw samples, committed at once."""
        if result.status not in STATUSES:
            raise ValueError(f"unknown cell status {result.status!r}")
        row = result.row()
        body = result.to_dict()
        samples = body.pop("samples")
        cols = list(CANONICAL_COLUMNS)
        quoted = ", ".join(f'"{c}"' for c in cols)
        with self._lock, self.conn:
            self.conn.execute("DELETE FROM cells WHERE sweep_id = ? AND cell_key = ?", (sweep_id, result.config.key))
            cur = self.conn.execute(
                f"INSERT INTO cells (sweep_id, idx, cell_key, finished_at, {quoted}, result_json)"
                f" VALUES (?, ?, ?, ?, {', '.join('?' for _ in cols)}, ?)",
                (sweep_id, index, result.config.key, _now(), *[_sql_value(row[c]) for c in cols], json.dumps(body)),
            )
            cell_id = int(cur.lastrowid)
            self.conn.executemany(
                "INSERT INTO samples (cell_id, seq, phase, wall_s, data_json) VALUES (?,?,?,?,?)",
                [(cell_id, i, s.get("phase", "timed"), s.get("wall_s"), json.dumps(s)) for i, s in enumerate(samples)],
            )
            self.conn.execute("UPDATE sweeps SET updated_at = ? WHERE id = ?", (_now(), sweep_id))
        return cell_id

    def set_cell_quality(self, sweep_id: int, columns_by_config: dict[str, dict]) -> int:
        """Give every cell of a configuration ("device|engine|precision") its quality columns; returns how many."""
        sets = ", ".join(f'"{c}" = ?' for c in QUALITY_COLUMNS)
        changed = 0
        with self._lock, self.conn:
            rows = self.conn.execute("SELECT id, device, engine, precision, result_json FROM cells WHERE sweep_id = ?",
                                     (sweep_id,)).fetchall()
            for r in rows:
                columns = columns_by_config.get(f"{r['device']}|{r['engine']}|{r['precision']}")
                if columns is None:
                    continue
                body = {**json.loads(r["result_json"]), "quality": columns}
                self.conn.execute(f"UPDATE cells SET {sets}, result_json = ? WHERE id = ?",
                                  (*[columns.get(c) for c in QUALITY_COLUMNS], json.dumps(body), r["id"]))
                changed += 1
        return changed

    def add_fidelity(self, sweep_id: int, record: dict) -> None:
        with self._lock, self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO fidelity (sweep_id, device, engine, precision, status, record_json)"
                " VALUES (?,?,?,?,?,?)",
                (sweep_id, record["device"], record["engine"], record["precision"], record.get("status", "ok"),
                 json.dumps(record)))

    def set_note(self, sweep_id: int, key: str, value) -> None:
        """Keep a fact about the whole sweep (its interleaving plan, the order of each pass) as JSON."""
        with self._lock, self.conn:
            self.conn.execute("INSERT OR REPLACE INTO sweep_notes VALUES (?, ?, ?)", (sweep_id, key, json.dumps(value)))

    # -- reading ---------------------------------------------------------------------------------

    def notes(self, sweep_id: int) -> dict:
        with self._lock:
            rows = self.conn.execute("SELECT key, value_json FROM sweep_notes WHERE sweep_id = ?", (sweep_id,))
            return {r[0]: json.loads(r[1]) for r in rows.fetchall()}

    def sweep(self, sweep_id: int) -> dict | None:
        with self._lock:
            r = self.conn.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        return _sweep_dict(r) if r else None

    def sweeps_list(self) -> list[dict]:
        """All sweeps, newest first, with cell counts (spec and environment included)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT s.*, COUNT(c.id) AS n_cells, SUM(c.status = 'ok') AS n_ok FROM sweeps s"
                " LEFT JOIN cells c ON c.sweep_id = s.id GROUP BY s.id ORDER BY s.id DESC").fetchall()
        return [{**_sweep_dict(r), "n_cells": r["n_cells"], "n_ok": r["n_ok"] or 0} for r in rows]

    def results(self, sweep_id: int, with_samples: bool = True) -> list[CellResult]:
        """The cells of a sweep as CellResult objects, in grid order."""
        with self._lock:
            rows = self.conn.execute("SELECT id, result_json FROM cells WHERE sweep_id = ? ORDER BY idx",
                                     (sweep_id,)).fetchall()
            out = []
            for r in rows:
                body = json.loads(r["result_json"])
                if with_samples:
                    body["samples"] = [json.loads(s[0]) for s in self.conn.execute(
                        "SELECT data_json FROM samples WHERE cell_id = ? ORDER BY seq", (r["id"],))]
                out.append(CellResult.from_dict(body))
        return out

    def fidelity(self, sweep_id: int) -> list[dict]:
        with self._lock:
            rows = self.conn.execute("SELECT record_json FROM fidelity WHERE sweep_id = ? ORDER BY id",
                                     (sweep_id,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def measured_here(self) -> list[dict]:
        """Every `ok` cell of this machine's own sweeps (imported ones ran elsewhere), with `calls_s`: the
        seconds its calls took (cold, warm-up and timed), so the rest of its wall time is process overhead, and
        `own_elapsed`: whether `elapsed_s` is the cell's own work (0 for an interleaved row written before
        `worker_busy_s` was kept: its `elapsed_s` is its worker's lifetime, mostly waits for the other cells)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT c.model, c.device, c.engine, c.precision, c.batch_size, c.threads, c.tokens, c.step_ms,"
                " c.latency_p50_s, c.elapsed_s,"
                " (COALESCE(c.passes, 0) <= 1"
                "  OR json_extract(c.result_json, '$.extra.worker_busy_s') IS NOT NULL) AS own_elapsed,"
                " (SELECT COALESCE(SUM(wall_s), 0) FROM samples WHERE cell_id = c.id) AS calls_s"
                " FROM cells c JOIN sweeps s ON s.id = c.sweep_id"
                " WHERE s.origin = 'local' AND c.status = 'ok' AND c.step_ms > 0 AND c.elapsed_s > 0").fetchall()
        return [dict(r) for r in rows]

    def count_cells(self, sweep_id: int, status: str | None = None) -> int:
        query, args = "SELECT COUNT(*) FROM cells WHERE sweep_id = ?", [sweep_id]
        if status:
            query, args = query + " AND status = ?", args + [status]
        with self._lock:
            return int(self.conn.execute(query, args).fetchone()[0])


def _sql_value(v):
    return int(v) if isinstance(v, bool) else v


def _sweep_dict(r: sqlite3.Row) -> dict:
    return {
        "id": r["id"], "uuid": r["uuid"], "created_at": r["created_at"], "updated_at": r["updated_at"],
        "status": r["status"], "origin": r["origin"], "host": r["host"], "machine": r["machine"],
        "spec": json.loads(r["spec_json"]), "environment": json.loads(r["env_json"]),
    }


# ------------------------------------------------------------------------------------------------
# Frames for tables, plots and comparisons (pandas imported lazily)


def sweeps_frame(db_path: str | Path = DEFAULT_DB):
    """History: one row per sweep (id, created_at, kind, status, machine, origin, n_cells, n_ok, drift_pct, noisy)."""
    import pandas as pd

    with Store(db_path) as store:
        rows = [{**r, "drift": store.notes(r["id"]).get("drift") or {}} for r in store.sweeps_list()]
    cols = ["id", "uuid", "created_at", "kind", "status", "origin", "machine", "model", "n_cells", "n_ok", "drift_pct",
            "noisy"]
    return pd.DataFrame([{**{k: r[k] for k in cols if k in r}, "model": r["spec"].get("model"),
                          "kind": r["spec"].get("kind", "sweep"),  # "serve": a serving benchmark (no cells)
                          "drift_pct": r["drift"].get("drift_pct"), "noisy": r["drift"].get("noisy")} for r in rows],
                        columns=cols)


def cells_frame(db_path: str | Path = DEFAULT_DB, sweep_ids: list[int] | None = None):
    """Canonical rows of the given sweeps (all when None), failed cells included, with sweep columns."""
    import pandas as pd

    with Store(db_path) as store:
        sweeps = {s["id"]: s for s in store.sweeps_list()}
        ids = list(sweeps) if sweep_ids is None else [i for i in sweep_ids if i in sweeps]
        rows = []
        for sid in ids:
            for r in store.results(sid, with_samples=False):
                row = r.row()
                rows.append({"sweep_id": sid, "machine": _machine(row, sweeps[sid]["machine"]),
                             "created_at": sweeps[sid]["created_at"], **row})
    return pd.DataFrame(rows, columns=["sweep_id", "machine", "created_at", *CANONICAL_COLUMNS])


def _machine(row: dict, sweep_machine: str) -> str:
    """Where a row was measured: its cluster node (so comparisons and plots group a fleet sweep by node), else the
    sweep's machine."""
    if not row["node"]:
        return sweep_machine
    return f"{row['node']} · {row['node_machine']}" if row["node_machine"] else row["node"]


def fidelity_frame(db_path: str | Path = DEFAULT_DB, sweep_ids: list[int] | None = None):
    import pandas as pd

    cols = ["sweep_id", "device", "engine", "precision", "status", "reason", "token_match", "first_divergence",
            "hidden_rel_err", "hidden_rel_err_first_step", "steps", "dtype_gpt", "note"]
    with Store(db_path) as store:
        ids = [s["id"] for s in store.sweeps_list()] if sweep_ids is None else sweep_ids
        rows = [{"sweep_id": sid, **f} for sid in ids for f in store.fidelity(sid)]
    return pd.DataFrame(rows, columns=cols)


COMPARE_KEYS = ("engine", "device", "precision", "batch_size", "threads", "tokens", "compile", "stream")


def compare_frame(db_path: str | Path, sweep_ids: list[int], metric: str = "latency_p50_s"):
    """One row per configuration, one column per sweep (machine): `metric` side by side, ok cells only."""
    df = cells_frame(db_path, sweep_ids)
    ok = df[df["status"] == "ok"].copy()
    ok["sweep"] = ok["sweep_id"].astype(str) + ": " + ok["machine"].astype(str)
    return ok.pivot_table(index=list(COMPARE_KEYS), columns="sweep", values=metric, aggfunc="first").reset_index()


# ------------------------------------------------------------------------------------------------
# Bundles: portable JSON, parsed as data only


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
    bundle = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "exported_at": _now(), "sweeps": sweeps}
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
