"""Rewrites the README's (and docs/'s) generated blocks from the code: `python -m scripts.readme`.

A block is `<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`; what lies between is BLOCKS[NAME]() and nothing
else, so a limit, a default or a precision is stated where the code states it and the page shows it as it is now.
tests/docs/test_readme_generated.py fails when a block differs from what this writes (then run this script).
Measured figures (dated measurements) stay prose: no block holds them.
"""

from __future__ import annotations

import inspect
import re
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path

from chattts_lab import engines, requests, voices
from chattts_lab.checks import bounds_of
from chattts_lab.options import as_text
from chattts_lab.serve import openai_api, uploads
from chattts_lab.serve.policy import ServingPolicy
from chattts_lab.sweep.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/serving.md", "docs/measuring.md")
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = [header, tuple("---" for _ in header), *rows]
    return "".join("| " + " | ".join(str(c).replace("|", "\\|") for c in line) + " |\n" for line in lines)


def limits() -> str:
    """What one request, upload or voice may be; anything beyond is refused with a sentence saying so."""
    return _table(("limit", "at most"), [
        ("text per request (app, `python -m bench`, the library)", f"{requests.MAX_TEXT_CHARS:,} characters"),
        ("`input` of a `/v1/audio/speech` request (OpenAI's limit)", f"{openai_api.MAX_INPUT_CHARS:,} characters"),
        ("texts (sentences) in one batch", f"{requests.MAX_BATCH}"),
        ("audio tokens per text", f"{requests.MAX_NEW_TOKEN:,}"),
        ("an upload (HTTP 413 above)", f"{uploads.MAX_UPLOAD_BYTES // 2**20} MB"),
        ("a voice clip", f"{uploads.MAX_SAMPLE_SECONDS:g} s"),
        ("a voice card", f"{voices.MAX_CARD_BYTES // 1024} kB"),
    ])


def precisions() -> str:
    """Each precision (engines/precisions.py), the engines that offer it (the registry) and what it costs."""
    header = ("precision", "computes in", *engines.ENGINES, "what it costs the ear")
    rows = [(p.name, f"{str(p.compute_dtype).removeprefix('torch.')}{' (integer weights)' if p.quantized else ''}",
             *("yes" if p.name in engines.precisions(e) else "no" for e in engines.ENGINES), p.quality_cost)
            for p in (engines.precision_of(name) for name in engines.PRECISIONS)]
    return _table(header, rows)


def _limit(annotation) -> str:
    bounds = bounds_of(annotation)
    low = next((f"{'>' if k == 'gt' else '>='} {bounds[k]:g}" for k in ("ge", "gt") if k in bounds), "")
    high = next((f"{'<' if k == 'lt' else '<='} {bounds[k]:g}" for k in ("le", "lt") if k in bounds), "")
    if "ge" in bounds and "le" in bounds:
        return f"{bounds['ge']:g}..{bounds['le']:g}"
    choices = [a for a in typing.get_args(annotation) if isinstance(a, str)]
    return " or ".join(choices) or ", ".join(filter(None, (low, high)))


def options_table(spec_cls, flags: tuple[str, ...]) -> str:
    """The spec's options with these flags, in this order: default, limit and help, as its argparse shows them."""
    hints, by_flag = typing.get_type_hints(spec_cls, include_extras=True), {}
    for f in fields(spec_cls):
        by_flag[f.metadata.get("flag")] = f
    rows = []
    for flag in flags:
        f = by_flag[flag]
        shown = "see what it does" if f.default is MISSING else as_text(f.default) if f.default is not None else "-"
        limit = " ".join(filter(None, (_limit(hints[f.name]), f.metadata.get("unit", ""))))
        rows.append((f"`{flag}`", shown, limit, f.metadata["help"]))
    return _table(("option", "default", "limit", "what it does"), rows)


def serving_policy() -> str:
    """The app's and Ray Serve's shared flags (chattts_lab/serve/policy.py)."""
    return options_table(ServingPolicy, tuple(f.metadata["flag"] for f in fields(ServingPolicy)))


def sweep_timing() -> str:
    """How `python -m bench` times a cell (chattts_lab/sweep/spec.py)."""
    return options_table(SweepSpec, ("--tokens", "--warmup", "--passes", "--repeats", "--min-time", "--max-repeats",
                                     "--timeout", "--drift-threshold"))


def _default(value) -> str:
    if value is None:
        return "none"
    return f'"{value}"' if isinstance(value, str) else str(value)


def gradio_api() -> str:
    """The app's two Gradio API endpoints (gradio_client's `c.predict`): their parameters in order, with defaults."""
    from webui.benchmark.sweep_run import api_run_sweep  # Gradio code: imported only when this block is written
    from webui.synthesis.handlers import api_synthesize

    def parameters(fn) -> str:
        taken = list(inspect.signature(fn).parameters.values())[1:]  # the first is the app's context, bound by it
        return ", ".join(f"{p.name} [{_default(p.default)}]" if p.default is not p.empty else p.name for p in taken)

    return _table(("endpoint", "parameters in order [default]"),
                  [("`/synthesize`", parameters(api_synthesize)), ("`/run_sweep`", parameters(api_run_sweep))])


BLOCKS = {"limits": limits, "precisions": precisions, "serving-policy": serving_policy, "sweep-timing": sweep_timing,
          "gradio-api": gradio_api}


def rewritten(text: str) -> str:
    """The text with every generated block holding what the code writes now (an unknown name is an error)."""
    def fill(m: re.Match) -> str:
        if m["name"] not in BLOCKS:
            raise KeyError(f"no generated block named {m['name']!r}; known: {', '.join(BLOCKS)}")
        return m.group(1) + BLOCKS[m["name"]]() + m.group(4)

    return BLOCK.sub(fill, text)


def blocks_in(text: str) -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def main() -> int:
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        if (new := rewritten(text)) != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
