"""Statistics are derived from raw samples; check them against values worked out by hand."""

import math

import pytest

from chattts_lab.trackers.stats import Latency, median, percentile


def test_latency_matches_hand_computed_values():
    lat = Latency.from_values([4.0, 1.0, 10.0, 2.0, 3.0])  # order must not matter
    assert lat.count == 5
    assert lat.mean == pytest.approx(4.0)
    assert lat.p50 == pytest.approx(3.0)
    # sorted 1,2,3,4,10: rank (5-1)*0.9 = 3.6 -> 4 + 0.6 * (10 - 4) = 7.6
    assert lat.p90 == pytest.approx(7.6)
    assert lat.p95 == pytest.approx(4 + 0.8 * 6)
    # sample std: squares of deviations 9,4,1,0,36 -> 50 / (5-1) = 12.5
    assert lat.std == pytest.approx(math.sqrt(12.5))
    assert (lat.min, lat.max) == (1.0, 10.0)
    assert lat.cv == pytest.approx(math.sqrt(12.5) / 4)


def test_even_count_median_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0


def test_single_sample_has_zero_spread():
    lat = Latency.from_values([0.25])
    assert (lat.count, lat.p50, lat.p90, lat.std) == (1, 0.25, 0.25, 0.0)


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="no samples"):
        Latency.from_values([])
    with pytest.raises(ValueError, match="must be finite"):
        Latency.from_values([1.0, float("nan")])
    with pytest.raises(ValueError, match="must be in 0..100, got 101"):
        percentile([1.0], 101)


def test_median_skips_missing_values():
    assert median([None, 3.0, 1.0, None, 2.0]) == 2.0
    assert median([None, None]) is None
