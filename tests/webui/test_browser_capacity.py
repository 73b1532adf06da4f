"""The Serving panel's capacity search in chromium (issue 25): "Find capacity" raises the users until the service
level breaks, says how many real-time streams this machine holds, draws every level tried, and keeps the answer in
the history's capacity table, as `python -m bench serve --capacity` does (tests/bench/test_capacity.py)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from bench.serving.capacity import capacity_frame
from chattts_lab.serve.policy import SchedulerPolicy
from tests.support.ui import LONG, open_tab, set_number, set_text, table_rows

pytestmark = pytest.mark.browser


def test_find_capacity_says_how_many_streams_hold_draws_the_search_and_keeps_it(page, app_dir):
    open_tab(page, "Benchmark", "Serving")
    page.locator("#sv-batching").get_by_label("request", exact=True).uncheck()  # one app: continuous batching
    set_text(page, "sv-max-batch", "1")
    set_number(page, "sv-requests", 1)
    set_number(page, "sv-tokens", 12)
    page.check("#sv-capacity input")
    # A service level every level meets (600 s, 0 %): the search doubles the users to the most tried, 2.
    set_number(page, "sv-slo-ttfa", 600)
    set_number(page, "sv-slo-continuity", 0)
    set_number(page, "sv-max-users", 2)
    set_number(page, "sv-min-streams", 1)  # the spec's 20 streams a level and a minute's confirmation: test_capacity.py
    set_number(page, "sv-confirm", 0)
    page.click("#sv-run")

    status = page.locator("#sv-status")
    expect(status).to_contain_text("finished", timeout=LONG * 2)
    expect(status).to_contain_text("This machine holds 2 real-time stream(s) of this configuration")
    expect(status).to_contain_text(f"continuous batching, {SchedulerPolicy.max_rows} rows")  # the app's own default
    expect(status).to_contain_text("Measured twice at 2: p99 first audio")
    levels = table_rows(page, "sv-table", at_least=4)
    # the floor (every row), the search, the deciding level again
    assert [r["users"] for r in levels] == [str(SchedulerPolicy.max_rows), "1", "2", "2"]
    curve = page.locator("#sv-fig-capacity .js-plotly-plot")
    curve.wait_for(timeout=LONG)
    users = curve.evaluate("el => el._fullData.flatMap(t => Array.from(t.x))")
    assert sorted(users) == [1, 2]
    kept = capacity_frame(app_dir / "history.sqlite")
    assert list(kept["streams"])[-1] == 2 and list(kept["batching"])[-1] == "continuous"
    found = table_rows(page, "sv-capacity-table", at_least=len(kept))  # it may render before its update comes
    assert found[-1]["streams"] == "2" and found[-1]["batching"] == "continuous"
    floor = list(kept["floor_streams"])[-1]  # beside it, the floor measured in the same run and the share of it
    assert float(found[-1]["floor_streams"]) == pytest.approx(floor, rel=0.01, abs=0.01)
    assert float(found[-1]["floor_pct"]) == pytest.approx(100 * 2 / floor, rel=0.01, abs=0.5)


def test_capacity_without_streaming_is_refused_in_one_line(page):
    open_tab(page, "Benchmark", "Serving")
    page.check("#sv-capacity input")
    page.uncheck("#sv-stream input")
    page.click("#sv-run")
    expect(page.locator(".toast-body").filter(has_text="needs streamed requests")).to_be_visible(timeout=LONG)
