"""How a grid axis is written (llama-bench's syntax): comma lists, and integer ranges lo-hi, lo-hi+step, lo-hi*factor.

    int_list("1,4,8") == (1, 4, 8);  int_list("1-8+2") == (1, 3, 5, 7);  int_list("1-16*2") == (1, 2, 4, 8, 16)

A value these parsers cannot read is a SpecError (chattts_lab.checks: every spec's error, sweeps' and serving's).
"""

from __future__ import annotations

import re

from chattts_lab.checks import SpecError


_RANGE = re.compile(r"^(\d+)-(\d+)(?:([+*])(\d+))?$")
_ON_OFF = {"on": True, "off": False, "1": True, "0": False, "true": True, "false": False, "yes": True, "no": False}
MAX_RANGE_VALUES = 4096  # larger than any axis can take (threads 1..4096); refused before it is built


def int_list(text: str) -> tuple[int, ...]:
    """'1,4,8', ranges '1-8' (step 1), '1-8+2' (step 2), '1-16*2' (doubling)."""
    out: list[int] = []
    for item in _items(text):
        m = _RANGE.match(item)
        if m:
            out += _expand_range(item, int(m[1]), int(m[2]), m[3], int(m[4] or 1))
            continue
        try:
            out.append(int(item))
        except ValueError:
            raise SpecError(f"{item!r} is not a whole number") from None
    return tuple(out)


def _expand_range(item: str, lo: int, hi: int, op: str | None, step: int) -> list[int]:
    if hi < lo or step < 1 or (op == "*" and (step < 2 or lo < 1)):
        raise SpecError(f"bad range {item!r}: use lo-hi, lo-hi+step or lo-hi*factor")
    count = (hi - lo) // step + 1 if op != "*" else 0  # a doubling range stays short
    if count > MAX_RANGE_VALUES:
        raise SpecError(f"{item!r} asks for {count:,} values; one range gives at most {MAX_RANGE_VALUES:,}")
    values, v = [], lo
    while v <= hi:
        values.append(v)
        v = v * step if op == "*" else v + step
    return values


def str_list(text: str) -> tuple[str, ...]:
    return tuple(i.lower() for i in _items(text))


def bool_list(text: str) -> tuple[bool, ...]:
    """'off,on' -> (False, True); also 1/0, true/false, yes/no."""
    out = []
    for item in _items(text):
        if item.lower() not in _ON_OFF:
            raise SpecError(f"{item!r} is not on or off")
        out.append(_ON_OFF[item.lower()])
    return tuple(out)


def _items(text: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise SpecError("empty list")
    return items
