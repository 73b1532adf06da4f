"""The last-sent-wins rule for displays that unqueued events fill (the Sweep form's estimate, its filters, the runtime
picks): unqueued requests run side by side, and one carrying the form's older values must not land over a newer one's
result (a refused run's refresh once did, in CI)."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from webui.common.events import LatestWins


def request(session: str):
    return SimpleNamespace(session_hash=session)  # all session_of reads of a gr.Request


def is_skip(value) -> bool:
    return value == gr.skip()


def test_a_request_overtaken_by_a_later_one_of_its_session_shows_nothing_and_the_later_one_shows():
    wins = LatestWins()
    older = wins.arrived(request("a"))
    newer = wins.arrived(request("a"))
    assert wins.shown(request("a"), newer, "new values") == "new values"  # the newer may end first...
    assert is_skip(wins.shown(request("a"), older, "old values"))  # ...and the older, ending later, shows nothing


def test_a_request_alone_shows_and_sessions_do_not_overtake_each_other():
    wins = LatestWins()
    mine = wins.arrived(request("a"))
    wins.arrived(request("b"))
    assert wins.shown(request("a"), mine, "mine") == "mine"
    assert wins.shown(None, wins.arrived(None), "no session") == "no session"


def test_forgotten_sessions_are_bounded_and_a_forgotten_one_still_shows():
    wins = LatestWins()
    first = wins.arrived(request("first"))
    for n in range(LatestWins.KEPT_SESSIONS):
        wins.arrived(request(f"s{n}"))
    assert len(wins._latest) == LatestWins.KEPT_SESSIONS
    assert wins.shown(request("first"), first, "shown") == "shown"


def test_an_overtaken_handler_that_answers_with_a_dict_updates_nothing():
    wins = LatestWins()
    older = wins.arrived(request("a"))
    wins.arrived(request("a"))
    assert wins.shown(request("a"), older, {"note": "old"}) == {}
