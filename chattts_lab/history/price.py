"""What a machine costs per hour, where that price came from, and the cost per audio hour it gives each row.

The price is a fact about a sweep (or serving run), kept as its sweep note `price` (so it travels in bundles and needs
no new column); the cost per audio hour is derived from it where a table is made (chattts_lab.metrics).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from chattts_lab import metrics

PRICE_NOTE = "price"
NO_SOURCE = "not stated"
COST_COLUMNS = ("usd_per_hour", "price_source", "usd_per_audio_hour")


@dataclass(frozen=True)
class MachinePrice:
    """Dollars per machine-hour and where the figure came from (a cloud's price list, an invoice, a guess)."""

    usd_per_hour: float
    source: str = NO_SOURCE

    def __post_init__(self):
        if not isinstance(self.usd_per_hour, (int, float)) or not math.isfinite(self.usd_per_hour) or \
                self.usd_per_hour <= 0:
            raise ValueError(f"the machine price must be a positive number of dollars per hour, not {self.usd_per_hour!r}")
        object.__setattr__(self, "source", str(self.source or "").strip()[:200] or NO_SOURCE)

    @staticmethod
    def given(usd_per_hour, source: str | None = None) -> "MachinePrice | None":
        """A price from a form or flags: nothing given (None, 0, blank) is no price."""
        if usd_per_hour in (None, "") or (isinstance(usd_per_hour, float) and math.isnan(usd_per_hour)):
            return None
        if float(usd_per_hour) == 0:
            return None
        return MachinePrice(float(usd_per_hour), source or NO_SOURCE)

    @staticmethod
    def from_note(note) -> "MachinePrice | None":
        try:
            return MachinePrice(float(note["usd_per_hour"]), str(note.get("source") or NO_SOURCE))
        except (TypeError, KeyError, ValueError):
            return None

    def as_note(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        return (f"Machine price ${self.usd_per_hour:g} per hour (source: {self.source}); $ per audio hour = price per "
                "hour / audio seconds per wall second (for a capacity: / real-time streams held).")


def price_from_notes(notes: dict) -> MachinePrice | None:
    return MachinePrice.from_note(notes.get(PRICE_NOTE)) if notes.get(PRICE_NOTE) else None


def with_cost(df, price: MachinePrice | None, rate_column: str = "audio_s_per_s"):
    """`df` with the price and each row's $ per audio hour (from `rate_column`); unchanged without a price."""
    if price is None or df is None or rate_column not in df:
        return df
    out = df.copy()
    out["usd_per_hour"], out["price_source"] = price.usd_per_hour, price.source
    out["usd_per_audio_hour"] = [_cost(price.usd_per_hour, rate) for rate in out[rate_column]]
    return out


def _cost(usd_per_hour, rate) -> float | None:
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(rate) else metrics.usd_per_audio_hour(usd_per_hour, rate)
