"""A person in chromium: a history holding quality rows (tests/data/quality-espeak-bundle.json: real measures of
espeak-ng clips standing in for five configurations) shows RTF against quality with its Pareto front, and the
fastest configuration within the quality floor, which follows the floor when it is edited."""

from __future__ import annotations

import re

import pytest

from chattts_lab.history.recommend import recommend_within_quality
from chattts_lab.history.bundle import import_bundle
from chattts_lab.history.frames import cells_frame
from tests.conftest import ROOT
from tests.support.ui import LONG, open_tab, pick_option, set_number, wait_toast

pytestmark = pytest.mark.browser
BUNDLE = ROOT / "tests" / "data" / "quality-espeak-bundle.json"
NAME = r"cpu · \w+ · \w+ · 2 threads"


def expected(tmp_path, **floor) -> str:
    """The configuration the library recommends from the bundle's rows (what the page must show)."""
    db = tmp_path / "expected.sqlite"
    import_bundle(db, BUNDLE)
    return re.match(r"\*\*(.+?)\*\*", recommend_within_quality(cells_frame(db), **floor).reason).group(1)


def test_quality_beside_speed_in_the_benchmark_tab(page, tmp_path):
    open_tab(page, "Benchmark", "History")
    page.locator("#h-bundle-in input[type=file]").set_input_files(str(BUNDLE))
    sweep_id = re.search(r"Imported sweep\(s\) (\d+)", wait_toast(page, r"Imported sweep\(s\) \d+")).group(1)
    page.click("#h-refresh")
    pick_option(page, "h-pick", f"^#{sweep_id} ")
    page.click("#h-load")
    open_tab(page, "Sweep")
    page.locator("#sw-status").filter(has_text="Showing sweep").wait_for(timeout=LONG)

    text = page.locator("#q-recommendation")
    text.filter(has_text="is the fastest within").wait_for(timeout=LONG)
    shown = text.inner_text()
    assert re.search(f"{expected(tmp_path)} is the fastest within 0.2 MOS and 2 points of WER", shown), shown
    assert "Faster but below the floor" in shown and "speechmos 0.0.1.1" in shown
    plot = page.locator("#fig-quality .js-plotly-plot")
    plot.wait_for(timeout=LONG)
    assert page.locator("#fig-quality .legendtext", has_text="Pareto front").count() == 1
    assert page.locator("#fig-quality .scatterlayer .point").count() >= 5  # five configurations and the front's
    page.screenshot(path=str(tmp_path / "quality-panel.png"), full_page=True)

    set_number(page, "q-mos-drop", 2)  # a floor every configuration meets: the fastest of all wins
    set_number(page, "q-wer-rise", 100)
    page.click("#q-show")
    looser = expected(tmp_path, mos_drop=2.0, wer_rise_pts=100.0)
    text.filter(has_text=re.compile(f"{looser} is the fastest within 2 MOS")).wait_for(timeout=LONG)
    assert re.search(NAME, looser)
