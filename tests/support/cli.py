"""`python -m bench` run in the test's own process, where a test is about what a command prints rather than about
its process (a fresh interpreter costs about 2 s of CPU importing torch; the process's own behaviour, a reader that
stops or a kill mid-sweep, is tested with real processes)."""

from __future__ import annotations


def bench_here(capsys, *args: str, code: int = 0):
    """`python -m bench ARGS` as `bench.cli.main`; asserts its exit code and returns what it printed (.out, .err)."""
    from bench.cli import main

    capsys.readouterr()  # what earlier steps printed is not this command's
    assert main(list(args)) == code
    return capsys.readouterr()
