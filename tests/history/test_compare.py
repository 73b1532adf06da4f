"""Drift, CPU share and ratio intervals from given numbers (deterministic: no worker, no clock)."""

import random

import numpy as np
import pytest

from chattts_lab.history.compare import Drift, Ratio, cell_ratio, drift_of_passes, speed_ratio, sweep_drift, sweep_ratios
from chattts_lab.sweep.results import RunConfig, cpu_starved_note, summarize
from chattts_lab.sweep.interleave import memory_plan, pass_order


def _cell(precision: str, walls_by_pass: dict[int, float], cpu_s: float | None = None, threads: int = 2):
    cfg = RunConfig("synthetic-tiny", "cpu", precision, 1, threads, 8)
    samples = [{"phase": "cold", "wall_s": 9.0}] + [
        {"phase": "timed", "wall_s": w, "pass": p, "position": 0, "audio_s": 0.17, "decode_s": w, "gpt_steps": 8,
         "tokens": [8], "peak_rss_mb": 100.0, "cpu_s": cpu_s if cpu_s is not None else 2 * w, "worker_pid": 1}
        for p, w in walls_by_pass.items()]
    return summarize(cfg, "ok", "", {"samples": samples})


def test_a_machine_that_slows_down_in_one_pass_drifts_by_that_much():
    # both cells 20 % slower in pass 1: the common factor moves, whatever each cell's own speed
    d = drift_of_passes([{0: 1.0, 1: 1.2, 2: 1.0}, {0: 3.0, 1: 3.6, 2: 3.0}], threshold_pct=5)
    assert d.pass_factors == pytest.approx((1.0, 1.2, 1.0))
    assert d.drift_pct == pytest.approx(20.0) and d.noisy
    assert "NOISY" in d.sentence() and "run the sweep again" in d.sentence()


def test_steady_passes_are_not_noisy_and_one_cells_outlier_does_not_move_the_median():
    d = drift_of_passes([{0: 1.0, 1: 1.0, 2: 1.0}, {0: 2.0, 1: 2.0, 2: 2.0}, {0: 1.0, 1: 1.5, 2: 1.0}], 5)
    assert d.drift_pct == pytest.approx(0.0) and not d.noisy
    assert "NOISY" not in d.sentence()


def test_drift_at_the_threshold_is_not_noisy_above_it_is():
    assert not drift_of_passes([{0: 1.0, 1: 1.05}, {0: 2.0, 1: 2.1}], 5).noisy  # exactly 5 %
    assert drift_of_passes([{0: 1.0, 1: 1.06}, {0: 2.0, 1: 2.12}], 5).noisy


def test_drift_needs_two_passes_over_two_cells_and_says_so():
    for times in ([{0: 1.0, 1: 2.0}], [{0: 1.0}, {0: 2.0}], []):
        d = drift_of_passes(times)
        assert d.drift_pct is None and not d.noisy and d.as_dict()["noisy"] is None
        assert "not checked" in d.sentence()


def test_sweep_drift_reads_the_raw_passes_of_ok_cells():
    cells = [_cell("fp32", {0: 1.0, 1: 1.3, 2: 1.0}), _cell("bf16", {0: 0.5, 1: 0.65, 2: 0.5})]
    assert sweep_drift(cells, 5).drift_pct == pytest.approx(30.0)
    assert isinstance(sweep_drift(cells, 50), Drift) and not sweep_drift(cells, 50).noisy


def test_identical_samples_mean_no_difference_measured():
    r = speed_ratio([1.0, 1.1, 0.9, 1.0], [1.0, 1.1, 0.9, 1.0])
    assert r.ratio == pytest.approx(1.0) and r.low <= 1.0 <= r.high and r.differs is False
    assert r.phrase("lab", "stock").startswith("no difference measured between lab and stock")


def test_clearly_separated_samples_give_an_interval_that_excludes_one():
    fast, slow = [1.0, 1.05, 0.95, 1.02, 0.98], [2.1, 2.0, 2.2, 1.9, 2.05]
    r = speed_ratio(fast, slow)
    assert r.differs and 1.0 < r.low <= r.ratio <= r.high
    assert r.phrase("lab int8", "stock fp32").startswith(f"lab int8 is {r.ratio:.3g}x faster than stock fp32 (95% CI ")
    flipped = speed_ratio(slow, fast)  # the faster side is named first either way
    assert flipped.phrase("stock fp32", "lab int8").startswith("lab int8 is ")


def test_the_interval_covers_a_known_ratio_about_as_often_as_it_claims_and_narrows_with_more_calls():
    # 200 seeded experiments whose true ratio of medians is 2: a widened interval would cover every time, a
    # too-narrow one far less than 95%. (A percentile bootstrap of a median under-covers a little with few calls.)
    rng = np.random.default_rng(7)
    ratios = [speed_ratio(rng.lognormal(0.0, 0.1, 9), 2 * rng.lognormal(0.0, 0.1, 9)) for _ in range(200)]
    coverage = sum(r.low <= 2.0 <= r.high for r in ratios) / len(ratios)
    assert 0.85 <= coverage < 1.0, coverage
    wide = np.median([r.high - r.low for r in ratios])
    narrow = np.median([r.high - r.low for r in (speed_ratio(rng.lognormal(0.0, 0.1, 40),
                                                             2 * rng.lognormal(0.0, 0.1, 40)) for _ in range(20))])
    assert narrow < 0.7 * wide


def test_an_interval_that_leaves_out_its_ratio_is_quoted_as_it_is_and_said_to_be_unstable():
    r = Ratio(2.1, 2.2, 2.4)  # what a percentile bootstrap of a few calls can give; never widened to hold 2.1
    assert not r.holds_ratio
    assert r.phrase("lab", "stock") == ("lab is 2.1x faster than stock (95% CI 2.2-2.4x; the interval leaves out "
                                        "the ratio itself: too few calls, measure more)")
    assert Ratio(2.1, 1.9, 2.3).holds_ratio and "leaves out" not in Ratio(2.1, 1.9, 2.3).phrase()


def test_one_call_each_gives_a_ratio_without_an_interval():
    r = speed_ratio([1.0], [2.0])
    assert r.ratio == 2.0 and r.low is None and r.differs is None and "too few" in r.phrase()


def test_cells_of_the_same_passes_are_paired_and_a_shared_drift_cancels():
    # pass 1 was slow for both cells: paired, the ratio is exactly 2 in every pass, so the interval is [2, 2]
    a = _cell("int8", {0: 1.0, 1: 1.5, 2: 1.0})
    b = _cell("fp32", {0: 2.0, 1: 3.0, 2: 2.0})
    r = cell_ratio(a, b)
    assert r.paired and r.ratio == pytest.approx(2.0) and r.low == pytest.approx(2.0) == r.high
    table = sweep_ratios([b, a])  # the first ok cell doing the same work is the baseline
    assert list(table["ratio"]) == [pytest.approx(2.0)]
    assert table["phrase"][0].startswith("cpu stock int8 batch 1 2 thr 8 tok is 2x faster than cpu stock fp32")


def test_statistics_come_from_every_pass_and_cpu_share_is_recorded():
    r = _cell("fp32", {0: 1.0, 1: 3.0, 2: 2.0})
    assert r.passes == 3 and r.latency.count == 3 and r.latency.p50 == 2.0
    assert r.cpu_share == pytest.approx(2.0) and r.reason == ""
    starved = _cell("fp32", {0: 1.0, 1: 1.0}, cpu_s=0.4)  # 0.4 CPU seconds a second for 2 threads
    assert starved.cpu_share == pytest.approx(0.4) and "CPU share 0.40" in starved.reason
    assert cpu_starved_note(RunConfig("m", "cpu", "fp32", 1, 1, 8), 0.6) == ""  # one thread, more than half a core


def test_every_pass_order_is_a_permutation_and_never_the_previous_one():
    rng, cells, previous = random.Random(0), ["a", "b", "c"], []
    for _ in range(50):
        order = pass_order(rng, cells, previous)
        assert sorted(order) == cells and order != previous
        previous = order
    assert pass_order(rng, ["a"], ["a"]) == ["a"]  # one cell: nothing else to choose


@pytest.mark.parametrize("loaded, cells, allowance, kept", [
    ([1000, 1000, 1000], 3, 10_000, 3),  # all fit: all stay
    ([1000, 1000, 1000], 5, 3500, 2),  # 3 fit; one place kept free for the worker reloaded in turn
    ([1000], 3, 1, 0),  # not even one fits: every cell is reloaded before its turn
])
def test_memory_plan_keeps_as_many_workers_as_fit(loaded, cells, allowance, kept):
    assert memory_plan(loaded, cells, allowance) == kept
