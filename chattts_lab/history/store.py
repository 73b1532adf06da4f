"""Every sweep and every cell, kept in one SQLite file (its tables: chattts_lab.history.schema).

Each cell is committed the moment it finishes, so a crash or an interrupt loses nothing already
measured. The database runs in WAL mode with a busy timeout so a sweep and a reader (the app, a
second sweep) can share it. A sweep left `running` by a process that no longer exists is marked
`interrupted` the next time the store is opened; `--resume` finishes it.

Tables for plots and comparisons read from it: chattts_lab.history.frames; portable JSON bundles to compare
machines: chattts_lab.history.bundle.
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

from chattts_lab.history.price import PRICE_NOTE, MachinePrice
from chattts_lab.history.schema import StoreError, migrate
from chattts_lab.quality import QUALITY_COLUMNS
from chattts_lab.sweep.results import CANONICAL_COLUMNS, STATUSES, CellResult
from chattts_lab.trackers.env import summary

log = logging.getLogger(__name__)

SWEEP_STATUSES = ("running", "finished", "interrupted", "cancelled")
DEFAULT_DB = Path("results") / "lab.sqlite"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
                with self._lock:
                    migrate(self.conn, self.path)
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
                                          [(utc_now(), i) for i in dead])
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
                (uuid or uuidlib.uuid4().hex, created_at or utc_now(), utc_now(), status, origin,
                 socket.gethostname() if origin == "local" else environment.get("hostname"),
                 pid if origin == "local" else None, _process_started(pid) if origin == "local" else None,
                 summary(environment), json.dumps(spec), json.dumps(environment)),
            )
            return int(cur.lastrowid)

    def update_environment(self, sweep_id: int, environment: dict) -> None:
        """Replace a sweep's environment (a sweep adds a bandwidth read before each pass, or each cell of one pass)."""
        with self._lock, self.conn:
            self.conn.execute("UPDATE sweeps SET env_json = ?, machine = ?, updated_at = ? WHERE id = ?",
                              (json.dumps(environment), summary(environment), utc_now(), sweep_id))

    def set_status(self, sweep_id: int, status: str) -> None:
        if status not in SWEEP_STATUSES:
            raise ValueError(f"unknown sweep status {status!r}")
        pid = os.getpid()
        with self._lock, self.conn:
            self.conn.execute(
                "UPDATE sweeps SET status = ?, updated_at = ?, host = ?, pid = ?, pid_started = ? WHERE id = ?",
                (status, utc_now(), socket.gethostname(), pid, _process_started(pid), sweep_id))

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
                (sweep_id, index, result.config.key, utc_now(), *[_sql_value(row[c]) for c in cols], json.dumps(body)),
            )
            cell_id = int(cur.lastrowid)
            self.conn.executemany(
                "INSERT INTO samples (cell_id, seq, phase, wall_s, data_json) VALUES (?,?,?,?,?)",
                [(cell_id, i, s.get("phase", "timed"), s.get("wall_s"), json.dumps(s)) for i, s in enumerate(samples)],
            )
            self.conn.execute("UPDATE sweeps SET updated_at = ? WHERE id = ?", (utc_now(), sweep_id))
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
        seconds its calls took (cold, warm-up and timed), so the rest of its wall time is process overhead, `cold_s`:
        its cold call's (None where none was kept), and
        `own_elapsed`: whether `elapsed_s` is the cell's own work (0 for an interleaved row written before
        `worker_busy_s` was kept: its `elapsed_s` is its worker's lifetime, mostly waits for the other cells)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT c.model, c.device, c.engine, c.precision, c.batch_size, c.threads, c.tokens, c.step_ms,"
                " c.latency_p50_s, c.elapsed_s,"
                " (COALESCE(c.passes, 0) <= 1"
                "  OR json_extract(c.result_json, '$.extra.worker_busy_s') IS NOT NULL) AS own_elapsed,"
                " (SELECT COALESCE(SUM(wall_s), 0) FROM samples WHERE cell_id = c.id) AS calls_s,"
                " (SELECT SUM(wall_s) FROM samples WHERE cell_id = c.id AND phase = 'cold') AS cold_s"
                " FROM cells c JOIN sweeps s ON s.id = c.sweep_id"
                " WHERE s.origin = 'local' AND c.status = 'ok' AND c.step_ms > 0 AND c.elapsed_s > 0").fetchall()
        return [dict(r) for r in rows]

    def read_seconds_here(self) -> list[float]:
        """Seconds each memory bandwidth read of this machine's own sweeps took (roofline: `mem_read_s`)."""
        with self._lock:
            rows = self.conn.execute("SELECT env_json FROM sweeps WHERE origin = 'local'").fetchall()
        return [float(s) for (env,) in rows for s in (json.loads(env or "{}").get("mem_read_s") or [])]

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


def save_price(db_path: str | Path, sweep_id: int, price: MachinePrice | None) -> None:
    """Keep a run's machine price in the history, as its sweep note (nothing when none was given)."""
    if price is not None:
        with Store(db_path) as store:
            store.set_note(sweep_id, PRICE_NOTE, price.as_note())
