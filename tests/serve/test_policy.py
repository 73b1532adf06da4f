"""One serving policy (chattts_lab/serve/policy.py): `python app.py` and `python -m chattts_lab.serve.rayserve` build
their shared flags from it, with the same defaults, limits and messages, and serve the same default configuration."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields

import pytest

from chattts_lab import engines
from chattts_lab.checks import SpecError
from chattts_lab.requests import MAX_BATCH, SCHEDULINGS
from chattts_lab.serve.policy import BatchPolicy, SchedulerPolicy, ServingPolicy

ray_cli = pytest.importorskip("chattts_lab.serve.rayserve")  # Ray is optional (requirements-cluster.txt)
SHARED = {f.metadata["flag"] for f in fields(ServingPolicy)}


def _app():
    import app

    return app


def _options(parse_args) -> dict[str, argparse.Action]:
    """Every option of a command line's parser, by flag (the parser caught as parse_args builds it)."""
    caught = {}

    def keep(parser, *args, **kwargs):
        caught["parser"] = parser
        raise SystemExit(0)

    with pytest.MonkeyPatch.context() as mp, pytest.raises(SystemExit):
        mp.setattr(argparse.ArgumentParser, "parse_args", keep)
        parse_args([])
    return {flag: a for a in caught["parser"]._actions for flag in a.option_strings}


def test_both_command_lines_offer_every_policy_flag_with_the_same_help_and_choices():
    app, ray = _options(_app().parse_args), _options(ray_cli.parse_args)
    assert SHARED == {"--model", "--auth", "--engine", "--precision", "--device", "--threads", "--batching",
                      "--max-batch", "--max-wait-ms", "--max-rows", "--max-queue"}
    for flag in SHARED:
        assert (app[flag].help, app[flag].choices, app[flag].default) == (
            ray[flag].help, ray[flag].choices, ray[flag].default), flag
    assert tuple(app["--batching"].choices) == SCHEDULINGS


def test_with_no_flags_ray_serve_serves_what_the_app_serves_before_a_sweep(tmp_path, monkeypatch):
    from chattts_lab.serve.runtime import serving_choice

    monkeypatch.delenv("CHATTTS_LAB_AUTH", raising=False)
    plan = ray_cli.plan_from_args(ray_cli.parse_args([]))
    app_default = serving_choice(tmp_path / "empty.sqlite", "synthetic-tiny").settings
    assert (plan.settings.engine, plan.settings.precision) == (app_default.engine, app_default.precision)
    assert (plan.settings.engine, plan.settings.precision) == engines.served_default("cpu")
    assert plan.policy == ServingPolicy() and plan.continuous() == (ServingPolicy.batching == "continuous")


@pytest.mark.parametrize("argv", [[], ["--model", "synthetic-tiny", "--auth", "ann:pw", "--batching", "request",
                                        "--max-batch", "3", "--max-wait-ms", "40", "--max-rows", "5", "--max-queue", "2"]])
def test_the_app_and_ray_serve_carry_the_one_policy_their_flags_give(argv, tmp_path, monkeypatch):
    """The app's context and Ray Serve's plan each hold the ServingPolicy whole; nothing is copied out beside it."""
    monkeypatch.setenv("CHATTTS_LAB_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("CHATTTS_LAB_HISTORY", str(tmp_path / "history.sqlite"))
    monkeypatch.delenv("CHATTTS_LAB_AUTH", raising=False)
    app = _app()
    ctx, plan = app.context_from_args(app.parse_args(argv)), ray_cli.plan_from_args(ray_cli.parse_args(argv))
    assert ctx.policy == plan.policy == ServingPolicy.from_args(app.parse_args(argv))
    if argv:
        assert (ctx.policy.model, ctx.policy.auth, ctx.policy.request_level(), ctx.policy.rows()) == (
            "synthetic-tiny", "ann:pw", BatchPolicy(3, 40.0), SchedulerPolicy(5, 2))


@pytest.mark.parametrize("argv, said", [
    (["--max-batch", "0"], f"max batch must be in 1..{MAX_BATCH}, got 0"),
    (["--max-batch", str(MAX_BATCH + 1)], f"max batch must be in 1..{MAX_BATCH}, got {MAX_BATCH + 1}"),
    (["--max-rows", "0"], f"max rows must be in 1..{MAX_BATCH}, got 0"),
    (["--max-rows", str(MAX_BATCH + 1)], f"max rows must be in 1..{MAX_BATCH}, got {MAX_BATCH + 1}"),
    (["--max-queue", "-1"], "max queue must be in 0..10000, got -1"),
    (["--max-queue", "10001"], "max queue must be in 0..10000, got 10001"),
    (["--max-wait-ms", "-0.5"], "max wait must be in 0..600000 ms, got -0.5"),
    (["--max-wait-ms", "600000.5"], "max wait must be in 0..600000 ms, got 600000.5"),
    (["--threads", "0"], "threads must be at least 1, got 0"),
    (["--auth", "no-colon"], "--auth takes user:pass"),
])
def test_both_command_lines_refuse_a_value_out_of_the_policys_limits_in_the_same_words(argv, said):
    with pytest.raises(SpecError, match=f"^{re.escape(said)}$"):
        ray_cli.plan_from_args(ray_cli.parse_args(argv))
    with pytest.raises(SystemExit, match=f"^{re.escape(said)}$"):
        _app().main(argv)


def test_both_ends_of_each_bound_are_accepted():
    low = ServingPolicy.from_args(argparse.Namespace(max_batch=1, max_rows=1, max_queue=0, max_wait_ms=0.0, threads=1))
    high = ServingPolicy.from_args(argparse.Namespace(max_batch=MAX_BATCH, max_rows=MAX_BATCH, max_queue=10_000,
                                                      max_wait_ms=600_000.0))
    assert (low.request_level(), low.rows()) == (BatchPolicy(1, 0.0), SchedulerPolicy(1, 0))
    assert (high.request_level(), high.rows()) == (BatchPolicy(MAX_BATCH, 600_000.0), SchedulerPolicy(MAX_BATCH, 10_000))


def test_the_scheduling_bounds_take_their_defaults_and_limits_from_the_policy():
    assert (BatchPolicy().max_batch, BatchPolicy().max_wait_ms) == (ServingPolicy.max_batch, ServingPolicy.max_wait_ms)
    assert (SchedulerPolicy().max_rows, SchedulerPolicy().max_queue) == (ServingPolicy.max_rows, ServingPolicy.max_queue)
    with pytest.raises(ValueError, match=f"max batch must be in 1..{MAX_BATCH}, got 0"):
        BatchPolicy(0)
    with pytest.raises(ValueError, match=f"max rows must be in 1..{MAX_BATCH}, got {MAX_BATCH + 1}"):
        SchedulerPolicy(MAX_BATCH + 1)
