"""The stall a real-time listener hears, computed from constructed arrival timelines (no clocks, no model)."""

import pytest

from bench.serving.listening import Stalls, player_stalls
from bench.serving.summaries import continuity_pct

SR = 1000  # samples per second, so that samples read as milliseconds


def test_a_stream_that_stays_ahead_of_the_player_never_stalls():
    # 1 s of audio at first, then 0.5 s every 0.5 s: each piece comes exactly when the last one runs out
    arrivals = [(0.2, 1000), (1.2, 1500), (1.7, 2000), (2.2, 2500)]
    assert player_stalls(arrivals, SR) == Stalls(0.0, 0.0, 0)


def test_a_late_piece_stalls_the_player_for_exactly_its_lateness():
    # 0.5 s of audio at t=1.0 runs dry at 1.5; the next piece comes at 1.8: a 0.3 s stall, playback resumes
    # from 1.8, so the third piece (due at 1.8 + 0.5 = 2.3) at 2.35 stalls 0.05 s more
    stalls = player_stalls([(1.0, 500), (1.8, 1000), (2.35, 1500)], SR)
    assert stalls.total_s == pytest.approx(0.35) and stalls.worst_s == pytest.approx(0.3) and stalls.count == 2
    assert not stalls.continuous() and stalls.continuous(limit_s=0.31)


def test_time_to_first_audio_is_not_a_stall_and_empty_pieces_are_ignored():
    # the player starts only at the first samples (t=3.0), however late; zero-sample pieces (headers) are skipped
    assert player_stalls([(0.1, 0), (3.0, 200), (3.1, 400), (3.15, 400)], SR) == Stalls(0.0, 0.0, 0)


def test_many_short_stalls_add_up_but_each_stays_below_the_continuity_limit():
    # 100 ms of audio every 150 ms: 50 ms short each time
    arrivals = [(i * 0.15, (i + 1) * 100) for i in range(11)]
    stalls = player_stalls(arrivals, SR)
    assert stalls.count == 10 and stalls.worst_s == pytest.approx(0.05)
    assert stalls.total_s == pytest.approx(0.5) and stalls.continuous()


def test_a_stream_with_no_audio_has_no_stalls_and_shrinking_counts_are_refused():
    assert player_stalls([], SR) == Stalls(0.0, 0.0, 0)
    with pytest.raises(ValueError, match="must not decrease"):
        player_stalls([(0.1, 500), (0.2, 400)], SR)


def test_continuity_counts_failed_streams_as_broken_and_ignores_whole_files():
    records = [{"stream": True, "status": "ok", "continuous": True}, {"stream": True, "status": "ok", "continuous": False},
               {"stream": True, "status": "lost", "continuous": None}, {"stream": False, "status": "ok", "continuous": None}]
    assert continuity_pct(records) == pytest.approx(100 / 3)
    assert continuity_pct([{"stream": False, "status": "ok"}]) is None
