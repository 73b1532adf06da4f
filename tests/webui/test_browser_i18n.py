"""A person whose browser speaks Chinese (chromium in zh-CN): the page follows the browser's language (gr.I18n,
webui/i18n/texts.py), a synthesis and a quick sweep run with Chinese status, metrics and banner, a mistake is told in
Chinese, and English left on either tab fails the walk unless it is named here (LEFT, LEFT_BENCHMARK: proper names
and the English example texts). After the quick sweep the plots, the status line, the recommendation and the
"In use" note read whole in Chinese, a History message too, and so does a capacity run's sentence."""

from __future__ import annotations

import re

import pytest

from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, start_app, stop_app
from tests.support.i18n import untranslated
from tests.support.ui import LONG, audio_href, close_toasts, open_app, set_number, set_text, wait_new_audio, wait_toast

pytestmark = pytest.mark.browser

# Proper names and units that stay as they are in Chinese text.
PROPER = {"int", "ChatTTS", "Lab", "Top-P", "Top-K", "JSON", "OpenAI", "token", "API", "lab", "stock", "onnx", "fp32", "int8",
          "cpu", "uv_break", "laugh", "lbreak"}
# What the Synthesis tab shows in English: the English examples (content, not interface).
# Examples' own text, and Gradio's transient queue indicator ("queue: 1/1 | 0.0s"), shown while an event of the
# page's opening waits: Gradio's, not the page's (a scan that met it failed once, 2026-12-06)
LEFT = (r"^Hello! This is ChatTTS Lab", r"^That joke was so bad", r"^我最近在学 English", r"^queue: \d+/\d+ \|")


@pytest.fixture(scope="module")
def zh_page(tmp_path_factory, playwright_session):
    tmp = tmp_path_factory.mktemp("zh")
    url, proc = start_app(tmp)
    try:
        ctx = playwright_session.chromium.launch_persistent_context(
            str(tmp / "profile"), executable_path=CHROMIUM, headless=True, args=[*CHROMIUM_FLAGS, "--lang=zh-CN"],
            locale="zh-CN", viewport={"width": 1400, "height": 1000})
        ctx.set_default_timeout(60_000)
        page = open_app(ctx, url)
        yield page
        ctx.close()
    finally:
        stop_app(proc)


def english_lines(text: str) -> list[str]:
    """Lines in English: an English word that is not a proper name, and no Chinese (a translated line may keep names
    such as MOS or README)."""
    words = lambda line: [w for w in re.findall(r"[A-Za-z][A-Za-z_-]{2,}", line) if w not in PROPER]
    return [line.strip() for line in text.splitlines() if words(line) and not re.search(r"[\u4e00-\u9fff]", line)]


def test_the_tabs_and_the_synthesis_tab_read_in_chinese_and_what_is_left_is_listed(zh_page):
    from webui.i18n.texts import ZH

    assert zh_page.evaluate("navigator.language") == "zh-CN"
    assert zh_page.locator("button[role=tab]").all_inner_texts()[:2] == ["语音合成", "基准测试"]
    assert zh_page.locator("#intro").inner_text().strip() == ZH["Try ChatTTS voices and measure how fast they run on "
                                                                "this machine."]
    # the note on what runs and why, and the fastest one's button, are made at run time, when the page opens
    zh_page.locator("#in-use").filter(has_text="当前使用").wait_for()  # set with the button, in one update
    assert untranslated(zh_page.locator("#in-use").inner_text()) == []
    if zh_page.locator("#use-fastest").is_visible():  # offered where a faster configuration runs here
        assert zh_page.locator("#use-fastest").inner_text().startswith("使用最快的配置")
    tab = zh_page.locator("#tab-synthesis").inner_text()
    for english in ("Generate", "Voice", "Sampling", "Runtime", "Temperature", "Voice card: export / import"):
        assert ZH[english] in tab
    left = [line for line in english_lines(tab) if not any(re.search(p, line) for p in LEFT)]
    assert left == [], f"English left on the Synthesis tab in zh-CN: {left}"


def test_a_synthesis_runs_from_the_chinese_page(zh_page):
    zh_page.fill("#text textarea", "你好，欢迎使用 ChatTTS Lab。")
    set_number(zh_page, "max-new-token", 16)
    set_number(zh_page, "min-new-token", 16)
    before = audio_href(zh_page)
    zh_page.click("#generate")
    assert wait_new_audio(zh_page, before, timeout=LONG)
    # the metrics line and the banner over synthetic audio read in Chinese too
    metrics = zh_page.locator("#metrics").inner_text() if zh_page.locator("#metrics").count() else ""
    assert "延迟" in metrics and "阶段" in metrics, metrics
    banner = zh_page.locator("#banner").inner_text()
    assert banner.strip() == "" or "合成（随机）权重" in banner, banner


def test_a_mistake_is_told_in_chinese(zh_page):
    from tests.support.ui import close_toasts, wait_toast

    zh_page.fill("#text textarea", "")
    zh_page.click("#generate")
    wait_toast(zh_page, "文本为空")
    close_toasts(zh_page)


def test_messages_follow_the_requests_language_and_stay_english_when_not_translated():
    from types import SimpleNamespace

    from webui.i18n.texts import localized

    zh, en = SimpleNamespace(headers={"accept-language": "zh-CN,zh;q=0.9"}), SimpleNamespace(headers={})
    assert localized("text 2 is empty", zh) == "文本2为空" and localized("text is empty", en) == "text is empty"
    assert localized("unknown voice 'Nobody'; known voices: Aria, Bo or seed:N", zh) == \
        "未知的音色“Nobody”；可用的音色：Aria, Bo，或 seed:N"
    assert localized("something new went wrong", zh) == "something new went wrong"


# The tables' column names are canonical (the CSV's, the API's, `python -m bench`'s): they stay as they are.
def column_names() -> set[str]:
    from chattts_lab.history.report import results_frame, shown_columns
    from webui.benchmark import serving_tab, sweep_history

    return {*results_frame([]).columns, *shown_columns(results_frame([])), *serving_tab.TABLE,
            *serving_tab.CAPACITY_TABLE, *sweep_history.HISTORY_COLUMNS, "configuration", "sweep A", "sweep B"}


# What the Benchmark tab shows in English in zh-CN, by name: torch.compile (a proper name, the switch's label).
LEFT_BENCHMARK = (r"^torch\.compile$",)


def open_sweep_panel(page) -> None:
    """The Benchmark tab's Sweep panel, whichever panel a test left open."""
    page.locator("button[role=tab]", has_text="基准测试").click()
    page.locator("#tab-benchmark button[role=tab]", has_text="扫描").first.click()
    page.locator("#sw-run").wait_for()


def benchmark_text(page) -> str:
    """The text of every panel of the Benchmark tab (Sweep, Serving, History, Hardware), each opened in turn."""
    open_sweep_panel(page)
    page.locator("#fig-latency .gtitle").filter(has_text="延迟与批大小").wait_for()  # redrawn when the page opened
    texts = []
    for name, shown in (("服务", "#sv-run"), ("历史", "#h-refresh"), ("硬件", "#hw-json"), ("扫描", "#sw-run")):
        page.locator("#tab-benchmark button[role=tab]", has_text=name).first.click()
        page.locator(shown).wait_for()
        page.wait_for_timeout(500)
        data = page.locator("#hw-json").inner_text() if name == "硬件" else ""  # the machine's record: data
        texts.append("\n".join(line for line in page.locator("#tab-benchmark").inner_text().splitlines()
                               if line not in set(data.splitlines())))
    return "\n".join(texts)


def test_the_benchmark_tab_reads_in_chinese_and_no_english_is_left(zh_page):
    from webui.i18n.texts import ZH

    tab = benchmark_text(zh_page)
    for english in ("Run sweep", "Devices (present here)", "Machine price ($ per hour)", "Memory budget (MB of peak RSS)",
                    "Sweep", "History", "Hardware", "Run serving benchmark", "Concurrent users (list or range)",
                    "Quality figure"):
        assert ZH[english] in tab, english
    columns = column_names()
    left = [line for line in english_lines(tab) if line not in columns
            and not any(re.search(p, line) for p in LEFT_BENCHMARK)]
    zh_page.locator("button[role=tab]", has_text="语音合成").click()
    assert left == [], f"English left on the Benchmark tab in zh-CN ({len(left)} lines): {left}"


def plot_texts(page, elem_id: str) -> list[str]:
    """The texts plotly drew in a plot: its title, axis and legend titles, legend entries and notes."""
    parts = ".gtitle, .g-xtitle, .g-ytitle, .legendtitletext, .legendtext, .annotation-text"
    return [t for t in page.locator(f"#{elem_id}").locator(parts).all_text_contents() if t.strip()]


def test_a_quick_sweep_runs_from_the_chinese_page_with_a_machine_price(zh_page):
    open_sweep_panel(zh_page)
    zh_page.click("#sw-quick")
    zh_page.locator("#sw-estimate").filter(has_text="6 个单元").wait_for(timeout=LONG)
    # stock against lab at fp32 only: what is said after a sweep is the same for two cells as for the preset's six
    # (the English walk runs them all: test_browser_benchmark.py), in a third of the time
    for precision in ("int8", "int4"):
        zh_page.locator("#sw-precisions").get_by_label(precision, exact=True).uncheck()
    zh_page.locator("#sw-estimate").filter(has_text="2 个单元").wait_for(timeout=LONG)
    zh_page.locator("#sw-price input").fill("0.067")
    zh_page.locator("#sw-price-source textarea, #sw-price-source input").first.fill("一台云主机的按需价格")
    zh_page.click("#sw-run")
    zh_page.locator("#sw-status").filter(has_text=re.compile(r"扫描 \d+ 已完成")).wait_for(timeout=900_000)
    header = zh_page.locator("#sw-table").inner_text()
    assert "usd_per_audio_hour" in header  # the table's columns keep their canonical names
    # the status line whole (drift and plan too), the bar, the gain and the recommendation, in Chinese
    zh_page.locator("#recommendation").filter(has_text="RTF").wait_for(timeout=LONG)
    for elem_id in ("sw-status", "sw-progress", "sw-gain", "recommendation"):
        text = zh_page.locator(f"#{elem_id}").inner_text()
        assert re.search(r"[\u4e00-\u9fff]", text) and untranslated(text) == [], (elem_id, text)
    # the plots drawn from the sweep: titles, axes, legends
    zh_page.locator("#fig-latency .gtitle").filter(has_text="延迟与批大小").wait_for()
    texts = [t for elem_id in ("fig-latency", "fig-rtf", "fig-pareto", "fig-memory", "fig-roofline")
             for t in plot_texts(zh_page, elem_id)]
    assert "吞吐量与延迟" in texts and "推理期间的峰值内存" in texts, texts
    assert [t for t in texts if untranslated(t)] == []
    # the Synthesis tab's note says what now runs, and why, from this sweep
    zh_page.locator("button[role=tab]", has_text="语音合成").click()
    note = zh_page.locator("#in-use").filter(has_text="扫描 #")
    note.wait_for(timeout=LONG)
    assert untranslated(note.inner_text()) == [], note.inner_text()


def test_a_history_message_is_told_in_chinese(zh_page):
    zh_page.locator("button[role=tab]", has_text="基准测试").click()
    zh_page.locator("#tab-benchmark button[role=tab]", has_text="历史").first.click()
    zh_page.click("#h-load")  # nothing picked
    wait_toast(zh_page, "请先在“扫描”框中选择")
    # the message (the toast's header, "Warning", is Gradio's own: its page draws the toast's type)
    message = zh_page.locator("[data-testid=toast-text]").filter(has_text="请先在").first.inner_text()
    assert untranslated(message) == [], message
    close_toasts(zh_page)
    zh_page.locator("button[role=tab]", has_text="语音合成").click()


def test_a_capacity_run_says_its_answer_in_chinese(zh_page):
    from webui.i18n.texts import ZH

    zh_page.locator("button[role=tab]", has_text="基准测试").click()
    zh_page.locator("#tab-benchmark button[role=tab]", has_text="服务").first.click()
    zh_page.locator("#sv-batching").get_by_label(ZH["request"], exact=True).uncheck()  # one app: continuous batching
    set_text(zh_page, "sv-max-batch", "1")
    set_number(zh_page, "sv-requests", 1)
    set_number(zh_page, "sv-tokens", 12)
    zh_page.check("#sv-capacity input")
    set_number(zh_page, "sv-slo-ttfa", 600)  # a service level every level meets: the search stops at the most tried
    set_number(zh_page, "sv-slo-continuity", 0)
    set_number(zh_page, "sv-max-users", 2)
    set_number(zh_page, "sv-min-streams", 1)  # the spec's 20 streams a level and a minute's confirmation: what
    set_number(zh_page, "sv-confirm", 0)      # they say is the English run's (test_browser_capacity.py), in Chinese
    zh_page.click("#sv-run")
    status = zh_page.locator("#sv-status").filter(has_text=re.compile(r"容量测试 \d+ 已完成"))
    status.wait_for(timeout=LONG * 2)
    text = status.inner_text()
    assert "本机可支撑 2 路此配置的实时流" in text and untranslated(text) == [], text
    zh_page.locator("#sv-fig-capacity .legendtext").first.wait_for(timeout=LONG)
    texts = plot_texts(zh_page, "sv-fig-capacity")
    assert "容量：p99 首段音频时间与实时流数" in texts and [t for t in texts if untranslated(t)] == [], texts
    zh_page.locator("button[role=tab]", has_text="语音合成").click()
