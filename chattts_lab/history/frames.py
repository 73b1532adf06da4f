"""The history as pandas tables, for tables, plots and comparisons (pandas imported lazily, on the first call)."""

from __future__ import annotations

from pathlib import Path

from chattts_lab import metrics
from chattts_lab.history.price import COST_COLUMNS, MachinePrice, price_from_notes
from chattts_lab.history.store import DEFAULT_DB, Store
from chattts_lab.sweep.results import CANONICAL_COLUMNS


def sweeps_frame(db_path: str | Path = DEFAULT_DB):
    """History: one row per sweep (id, created_at, kind, status, machine, origin, n_cells, n_ok, drift_pct, noisy, and
    the machine price it was given: usd_per_hour, price_source)."""
    import pandas as pd

    with Store(db_path) as store:
        rows = [{**r, "notes": store.notes(r["id"])} for r in store.sweeps_list()]
    cols = ["id", "uuid", "created_at", "kind", "status", "origin", "machine", "model", "n_cells", "n_ok", "drift_pct",
            "noisy", "usd_per_hour", "price_source"]
    return pd.DataFrame([{**{k: r[k] for k in cols if k in r}, "model": r["spec"].get("model"),
                          "kind": r["spec"].get("kind", "sweep"),  # "serve": a serving benchmark (no cells)
                          **_drift(r["notes"]), **_price(r["notes"])} for r in rows], columns=cols)


def _drift(notes: dict) -> dict:
    drift = notes.get("drift") or {}
    return {"drift_pct": drift.get("drift_pct"), "noisy": drift.get("noisy")}


def _price(notes: dict) -> dict:
    price = price_from_notes(notes)
    return {} if price is None else {"usd_per_hour": price.usd_per_hour, "price_source": price.source}


def saved_prices(db_path: str | Path = DEFAULT_DB) -> list[MachinePrice]:
    """Every distinct machine price the history keeps, newest first: what a person may pick again."""
    frame = sweeps_frame(db_path)
    priced = frame[frame["usd_per_hour"].notna()].drop_duplicates(["usd_per_hour", "price_source"])
    return [MachinePrice(float(r.usd_per_hour), r.price_source) for r in priced.itertuples()]


def cells_frame(db_path: str | Path = DEFAULT_DB, sweep_ids: list[int] | None = None):
    """Canonical rows of the given sweeps (all when None), failed cells included, with sweep columns and, where the
    sweep has a machine price, its price and each row's $ per audio hour."""
    import pandas as pd

    with Store(db_path) as store:
        sweeps = {s["id"]: s for s in store.sweeps_list()}
        ids = list(sweeps) if sweep_ids is None else [i for i in sweep_ids if i in sweeps]
        rows = []
        for sid in ids:
            price = price_from_notes(store.notes(sid))
            for r in store.results(sid, with_samples=False):
                row = r.row()
                rows.append({"sweep_id": sid, "machine": _machine(row, sweeps[sid]["machine"]),
                             "created_at": sweeps[sid]["created_at"], **row, **_cost(price, row["audio_s_per_s"])})
    return pd.DataFrame(rows, columns=["sweep_id", "machine", "created_at", *CANONICAL_COLUMNS, *COST_COLUMNS])


def _cost(price, audio_s_per_s) -> dict:
    if price is None:
        return {}
    return {"usd_per_hour": price.usd_per_hour, "price_source": price.source,
            "usd_per_audio_hour": metrics.usd_per_audio_hour(price.usd_per_hour, audio_s_per_s)}


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
