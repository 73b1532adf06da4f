"""Read a continuous-batching loop trace ($CHATTTS_LAB_LOOP_TRACE, chattts_lab/serve/loop_trace.py) back into
figures: per kind of event (count, median, p90, max ms; steps by rows), each row's first chunk (when, after what),
the chunks handed late (the row's listener had run dry: ahead_s < 0) with what the loop ran just before, and what
running rows waited between two steps of theirs, with and without a newcomer's prefill (or slice) in the wait.

    python scripts/probes/loop_trace_summary.py TRACE.jsonl [--late 0.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def per_kind(records: list[dict]) -> None:
    groups = defaultdict(list)
    for r in records:
        key = r["kind"] if r["kind"] not in ("step", "decode") else f"{r['kind']} {r['rows']} rows"
        groups[key].append(r["s"] * 1e3)
    print("| event | count | median ms | p90 ms | max ms | total s |\n|---|---|---|---|---|---|")
    for key in sorted(groups, key=lambda k: (k.split()[0], int(k.split()[1]) if len(k.split()) > 1 else 0)):
        v = groups[key]
        print(f"| {key} | {len(v)} | {statistics.median(v):.1f} | {pct(v, .9):.1f} | {max(v):.1f} "
              f"| {sum(v) / 1e3:.2f} |")
    decodes = [r for r in records if r["kind"] == "decode"]
    if decodes:
        tokens = [sum(r["tokens"]) for r in decodes]
        print(f"\ndecode calls: {len(decodes)}, tokens per call median {statistics.median(tokens):.0f}, "
              f"ms per call median {statistics.median(r['s'] * 1e3 for r in decodes):.1f}")


def first_chunks(records: list[dict]) -> None:
    prefill = {}
    for r in records:  # a prompt in slices: its slices together
        if r["kind"] in ("prefill", "slice"):
            p = prefill.setdefault(r["row"], dict(r, s=0.0))
            p.update(s=p["s"] + r["s"], rows=r["rows"])
    print("\n| row | prompt | rows after admit | first chunk after admit s | prefill ms |\n|---|---|---|---|---|")
    seen = set()
    for r in records:
        if r["kind"] == "chunk" and r["row"] not in seen:
            seen.add(r["row"])
            p = prefill.get(r["row"], {})
            print(f"| {r['row']} | {p.get('prompt')} | {p.get('rows')} | {r['since_admit_s']:.3f} | "
                  f"{p.get('s', float('nan')) * 1e3:.1f} |")


def late_chunks(records: list[dict], late: float) -> None:
    print(f"\nchunks handed with ahead_s < {late} (listener dry for -ahead_s before it):")
    for i, r in enumerate(records):
        if r["kind"] == "chunk" and r["ahead_s"] is not None and r["ahead_s"] < late:
            before = [x for x in records[max(0, i - 12):i] if x["kind"] != "chunk"]
            said = ", ".join(f"{x['kind']}{'/' + str(x.get('rows')) if 'rows' in x else ''} {x['s'] * 1e3:.0f}ms"
                             for x in before[-6:])
            print(f"  t={r['t']:.2f} row {r['row']} ahead {r['ahead_s'] * 1e3:.0f} ms, {r['tokens']} tokens; "
                  f"before: {said}")


def gaps(records: list[dict]) -> None:
    """Time in the loop thread outside any recorded event (prompt building, bookkeeping, waiting)."""
    loop = sorted((r for r in records if r["kind"] in ("prefill", "slice", "step", "decode")), key=lambda r: r["t"])
    holes = [b["t"] - (a["t"] + a["s"]) for a, b in zip(loop, loop[1:])]
    holes = [h for h in holes if 0 <= h < 1.0]  # longer: the loop was idle between requests
    if holes:
        print(f"\nbetween loop events: median {statistics.median(holes) * 1e3:.2f} ms, p90 {pct(holes, .9) * 1e3:.2f},"
              f" max {max(holes) * 1e3:.1f}, total {sum(holes):.2f} s")


def waits_between_steps(records: list[dict]) -> None:
    """From the end of one step to the start of the next, while rows generated: what every running row waited,
    split by whether a prefill or a slice of one ran in that wait (and the longest such wait: the longest iteration
    a newcomer cost the others)."""
    loop = sorted((r for r in records if r["kind"] in ("prefill", "slice", "step", "decode")), key=lambda r: r["t"])
    steps = [i for i, r in enumerate(loop) if r["kind"] == "step"]
    waits = {"with a prefill": [], "with a slice": [], "without": []}
    for a, b in zip(steps, steps[1:]):
        wait = loop[b]["t"] - (loop[a]["t"] + loop[a]["s"])
        # `rows` counts a whole prefill's row: one with no other row beside it went into an idle loop (the rows before
        # it had ended), which admits every newcomer whole and where no one waited
        beside = [r for r in loop[a + 1:b] if r["kind"] in ("prefill", "slice")]
        idle = any(r["kind"] == "prefill" and r["rows"] == 1 for r in beside)
        if wait < 1.0 and not idle:  # longer: the loop was idle between requests
            kinds = {r["kind"] for r in beside}
            waits["with a prefill" if "prefill" in kinds else "with a slice" if "slice" in kinds else "without"].append(
                wait * 1e3)
    print("\n| running rows waited between two steps | count | median ms | p90 ms | max ms |\n|---|---|---|---|---|")
    for key, v in waits.items():
        if v:
            print(f"| {key} | {len(v)} | {statistics.median(v):.1f} | {pct(v, .9):.1f} | {max(v):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--late", type=float, default=0.0)
    args = parser.parse_args()
    with open(args.trace, encoding="utf-8") as f:
        records = sorted((json.loads(line) for line in f), key=lambda r: r["t"])
    per_kind(records)
    first_chunks(records)
    late_chunks(records, args.late)
    gaps(records)
    waits_between_steps(records)


if __name__ == "__main__":
    main()
