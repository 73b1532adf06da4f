"""The sweep spec `python -m bench` builds from a command line, and the quick preset's command line: what the app's
forms and stored sweeps are compared with (the spec parity tests and the browser's quick preset share them)."""

from __future__ import annotations

from bench.cli import build_parser, spec_from_args
from tests.conftest import TINY

# The quick preset on a CPU that runs fp32 and int8 with both engines and int4 with the lab (the machines of this
# project do).
QUICK_ARGV = ["--engine", "stock,lab", "--precision", "fp32,int8,int4", "--batch", "1", "--tokens", "32", "--repeats", "2",
              "--warmup", "1", "--min-time", "0", "--fidelity", "off"]


def cli_spec(argv: list[str]):
    return spec_from_args(build_parser().parse_args(["--model", TINY, *argv]))
