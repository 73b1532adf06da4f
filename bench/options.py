"""What both bench commands (`python -m bench` and `python -m bench serve`) add to their command lines: the
machine's price, for $ per audio hour."""

from __future__ import annotations

import argparse

from chattts_lab.checks import SpecError
from chattts_lab.history.price import MachinePrice


def add_price_options(group) -> None:
    """The machine's price, for $ per audio hour in the tables and reports (kept with the run in the history)."""
    group.add_argument("--price", type=float, default=None, metavar="USD_PER_HOUR",
                       help="what this machine costs per hour, in dollars: tables and reports add $ per audio hour "
                            "(with --report ID: record it for that stored sweep)")
    group.add_argument("--price-source", default=None, metavar="TEXT",
                       help="where the price comes from, kept and shown with it (e.g. 'AWS c7a.large on-demand, "
                            "us-east-1, 2026-12')")


def price_from_args(args: argparse.Namespace) -> MachinePrice | None:
    try:
        return MachinePrice.given(args.price, args.price_source)
    except ValueError as exc:
        raise SpecError(f"--price: {exc}") from None
