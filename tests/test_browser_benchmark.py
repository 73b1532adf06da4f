"""A person in chromium: a quick sweep fills the table and plots, Stop keeps the finished rows, history
compares two machines through an exported and re-imported bundle, and the recommendation is applied."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, SCREENSHOTS
from tests.ui import LONG, open_accordion, open_tab, pick_option, row_count, wait_toast

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def finished_sweep(app_dir) -> str:
    """A finished sweep in the app's own history file, measured by `python -m bench` on the tiny weights, so the
    history and recommendation tests do not depend on which browser test ran first. Returns its "#N " label."""
    cmd = [sys.executable, "-m", "bench", "--model", "synthetic-tiny", "--db", str(app_dir / "history.sqlite"),
           "--batch", "1", "--tokens", "8", "--repeats", "1", "--min-time", "0", "--warmup", "0",
           "--fidelity", "off", "--yes", "--out", str(app_dir / "seed-report")]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return "#" + re.search(r"^sweep (\d+) finished", done.stdout + done.stderr, re.M).group(1) + " "


def fill(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(str(value))
    box.press("Tab")


def test_quick_sweep_fills_table_and_plots_and_stop_keeps_rows(page):
    open_tab(page, "Benchmark")
    page.click("#sw-quick")
    page.locator("#sw-estimate").filter(has_text="cell(s)").wait_for(timeout=LONG)
    # The quick preset, shrunk further for a test on busy cores: fp32 only, 8 tokens, 4 batch sizes.
    if page.locator("#sw-precisions input[name='int8']").is_checked():
        page.uncheck("#sw-precisions input[name='int8']")
    fill(page, "sw-batches", "1-4")
    fill(page, "sw-tokens", "8")
    fill(page, "sw-repeats", 1)
    fill(page, "sw-warmup", 0)
    page.locator("#sw-estimate").filter(has_text="4 cell(s)").wait_for(timeout=LONG)
    page.click("#sw-run")

    page.locator("#sw-progress progress").wait_for(timeout=LONG)
    deadline = time.monotonic() + 400
    while row_count(page, "sw-table") < 1:  # the table grows row by row
        assert time.monotonic() < deadline, "no result row appeared"
        page.wait_for_timeout(1000)
    assert "ok" in page.locator("#sw-table").inner_text()
    for fig in ("fig-latency", "fig-rtf", "fig-pareto", "fig-memory"):
        page.locator(f"#{fig} .js-plotly-plot").wait_for(timeout=LONG)
    assert "Pareto front" in page.locator("#fig-pareto").inner_text()

    page.click("#sw-stop")
    page.locator("#sw-status").filter(has_text="stopped").wait_for(timeout=LONG)
    table = page.locator("#sw-table").inner_text()
    # Finished rows stay; the cell that was running (if any) is kept as `cancelled`; the rest never ran.
    assert 1 <= row_count(page, "sw-table") < 4 or "cancelled" in table
    assert "ok" in table
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "benchmark.png"), full_page=True)


def test_history_compares_two_machines_via_a_bundle(page, tmp_path, finished_sweep):
    open_tab(page, "Benchmark", "History")
    page.click("#h-refresh")
    pick_option(page, "h-pick", "^" + finished_sweep)
    page.click("#h-export")
    link = page.locator("#h-bundle-out a[href*='.json']").first
    link.wait_for(timeout=LONG)
    bundle = json.loads(page.request.get(link.get_attribute("href")).body())
    # The same sweep as if measured on a second machine.
    other = bundle["sweeps"][0]
    other["uuid"] = other["uuid"][:-4] + "beef"
    other["environment"]["hostname"] = "other-box"
    other["environment"]["cpu"]["model"] = "Other CPU"
    for cell in other["cells"]:
        if cell.get("latency"):
            cell["latency"] = {k: (v * 2 if isinstance(v, float) else v) for k, v in cell["latency"].items()}
    path = tmp_path / "other-machine.json"
    path.write_text(json.dumps(bundle))
    page.locator("#h-bundle-in input[type=file]").set_input_files(str(path))
    wait_toast(page, r"Imported sweep\(s\) \d+")
    page.locator("#h-table").filter(has_text="imported").wait_for(timeout=LONG)

    pick_option(page, "cmp-a", "^" + finished_sweep)
    pick_option(page, "cmp-b", "Other CPU")
    page.click("#cmp-run")
    page.locator("#cmp-envs").filter(has_text="Other CPU").wait_for(timeout=LONG)
    page.locator("#cmp-fig .js-plotly-plot").wait_for(timeout=LONG)
    assert "Other CPU" in page.locator("#cmp-envs").inner_text()
    assert row_count(page, "cmp-table") >= 1

    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "chattts-lab-bundle", "version": 1, "sweeps": [')
    page.locator("#h-bundle-in input[type=file]").set_input_files(str(bad))
    wait_toast(page, "Could not import that bundle")


def test_recommendation_applies_to_the_synthesis_tab(page, finished_sweep):
    open_tab(page, "Benchmark", "History")
    page.click("#h-refresh")
    pick_option(page, "h-pick", "^" + finished_sweep)
    page.click("#h-load")
    open_tab(page, "Sweep")
    page.locator("#sw-status").filter(has_text="Showing sweep").wait_for(timeout=LONG)
    page.click("#recommend")
    rec = page.locator("#recommendation")
    rec.filter(has_text="RTF").wait_for(timeout=LONG)
    assert re.search(r"cpu · stock · fp32 · \d+ threads", rec.inner_text())
    page.click("#sw-reports")
    page.locator("#sw-report-files a[href*='results.html']").first.wait_for(timeout=LONG)
    for ext in ("csv", "json"):
        assert page.locator(f"#sw-report-files a[href*='results.{ext}']").count() == 1
    page.click("#apply-best")
    wait_toast(page, "Applied cpu · fp32")
    open_tab(page, "Synthesis")
    open_accordion(page, "Runtime")
    assert page.locator("#precision input").first.input_value() == "fp32"
