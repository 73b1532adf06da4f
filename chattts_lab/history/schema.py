"""The SQLite schema of the history (chattts_lab.history.store) and the upgrade of older files to it.

Tables: meta (schema version), sweeps (spec, environment, status), cells (one canonical row per cell,
plus the full result as JSON), samples (raw per-call measurements), fidelity (drift per precision),
sweep_notes (facts about a whole sweep, as JSON).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from chattts_lab.quality import QUALITY_TEXT_COLUMNS
from chattts_lab.sweep.results import CANONICAL_COLUMNS

log = logging.getLogger(__name__)

# Schema history: 1 = first release; 2 = cells.memory_budget_mb; 3 = cells.traceback; 4 = cells.weight_mb_per_step,
# mem_read_gbps, floor_step_ms, roofline (the step's floor at the machine's read bandwidth); 5 = cells.cpu_share and
# cells.passes, table sweep_notes (the interleaving plan and each pass's order). Files are kept across releases,
# so upgrades add the canonical columns and tables an older file lacks (see migrate), by name rather than
# by number: a development build wrote 4 for the version-5 additions alone, and that file upgrades too. A newer
# file than this build knows is refused rather than misread. 6 = cells.node, node_id, node_machine and
# node_fingerprint (where a cluster sweep ran each cell, chattts_lab.sweep.cluster), and cells.kernels (which kernels
# the GPT step ran, from the effective settings). 7 = the quality columns (chattts_lab.quality.QUALITY_COLUMNS: each
# cell's configuration scored beside stock fp32; NULL in older rows, which read as "quality not measured").
SCHEMA_VERSION = 7
_TEXT_COLUMNS = {"device", "precision", "engine", "status", "reason", "model", "device_effective", "dtype_gpt",
                 "kernels", "traceback", "node", "node_id", "node_machine", "node_fingerprint", *QUALITY_TEXT_COLUMNS}
_INT_COLUMNS = {"batch_size", "threads", "tokens", "compile", "stream", "repeats", "threads_effective",
                "compile_effective", "passes", "quality_clips"}


class StoreError(RuntimeError):
    """The database cannot be used (newer schema, not a lab database); the message says why."""


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


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file, or upgrade an older one in place, in one transaction."""
    # BEGIN IMMEDIATE takes the write lock first, so two processes opening an old file at once
    # upgrade it one after the other (the second finds it done) instead of racing.
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else None
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(f"{path} has schema version {version}; this build knows up to {SCHEMA_VERSION}")
        for statement in _schema().split(";"):  # executescript would commit mid-transaction
            if statement.strip():
                conn.execute(statement)
        _add_missing_columns(conn, path, version)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _add_missing_columns(conn: sqlite3.Connection, path: Path, version: int | None) -> None:
    """Upgrade an older file in place: every canonical column it lacks is added (NULL in old rows)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(cells)")}
    missing = [c for c in CANONICAL_COLUMNS if c not in have and c != "status"]
    for c in missing:
        conn.execute(f'ALTER TABLE cells ADD COLUMN "{c}" {_column_type(c)}')
    if version is not None and version < SCHEMA_VERSION:
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('upgraded_from', ?)", (str(version),))
        log.warning("%s: schema upgraded from version %d to %d (added %s)", path, version, SCHEMA_VERSION,
                    ", ".join(missing) or "nothing")
