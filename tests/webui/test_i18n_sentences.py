"""The sentences made at run time read whole in Chinese for a Chinese browser, and exactly as before in English: the
library writes them as `Said` (chattts_lab/said.py: the English text with its template and values), the page says
them through webui/i18n/texts.py; the plots' texts go through a translator (`say`)."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from chattts_lab.said import Said
from tests.support.i18n import untranslated

ROOT = Path(__file__).resolve().parents[2]
ZH_REQUEST = SimpleNamespace(headers={"accept-language": "zh-CN,zh;q=0.9"})
EN_REQUEST = SimpleNamespace(headers={"accept-language": "en-US,en;q=0.9"})
def say_zh(message) -> str:
    from webui.i18n.texts import localized

    return localized(message, ZH_REQUEST)


def test_every_template_the_code_writes_has_its_chinese():
    """Every Said("...") in the library and the app, every text the plots say and every fixed text the page
    localizes is in the tables (a mistake's pattern, MESSAGES_ZH, counts too)."""
    from webui.i18n.texts import MESSAGES_ZH, TABLE

    def known(text: str) -> bool:
        return text in TABLE or any(re.fullmatch(pattern, text, re.S) for pattern, _ in MESSAGES_ZH)

    missing = []
    for path in [*ROOT.glob("chattts_lab/**/*.py"), *ROOT.glob("webui/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("Said", "say", "localized") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                if not known(node.args[0].value):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.args[0].value}")
    assert missing == []


def test_a_said_is_its_english_text_and_survives_pickling_and_capitals():
    said = Said("{n} of {m} requests failed or were lost", n=1, m=3)
    assert said == "1 of 3 requests failed or were lost" and isinstance(said, str)
    again = pickle.loads(pickle.dumps(Said.joined([said.capitalized(), "", Said("none")])))
    assert again == "1 of 3 requests failed or were lost none" and again.params["part0"].params == {"n": 1, "m": 3}


def capacity_result(**changes) -> dict:
    return {"batching": "continuous", "max_batch": 8, "streams": 2, "broke_at": 4, "config": "lab int8 cpu 2",
            "tokens": 12, "slo_ttfa_p99_s": 1.0, "slo_continuity_pct": 99.0, "floor_streams": 3.2, "floor_rows": 8,
            "floor_pct": 62.5, "broken_because": Said("p99 time to first audio {ttfa} s > {limit:g} s", ttfa="1.50",
                                                      limit=1.0), **changes}


@pytest.mark.parametrize("result", [capacity_result(), capacity_result(broke_at=None, batching="request"),
                                    capacity_result(floor_streams=None, floor_pct=None, batching=None),
                                    capacity_result(floor_streams=0.4, streams=0, floor_pct=0.0),
                                    capacity_result(streams=8, broke_at=9, floor_streams=9.6, floor_pct=83.3),
                                    capacity_result(broke_at=3, broke_speed=1.02, floor_streams=4.4, floor_pct=45.5)])
def test_capacity_sentences_read_whole_in_chinese_and_as_before_in_english(result):
    from chattts_lab.history.price import MachinePrice
    from bench.serving.capacity import capacity_cost, capacity_sentence, floor_diagnosis

    result = {**result, "diagnosis": floor_diagnosis(result)}
    sentence = capacity_sentence(result)
    assert sentence.startswith(f"this machine holds {result['streams']} real-time stream(s) of this configuration")
    cost = capacity_cost(result, MachinePrice(0.067, "on-demand"))
    for english in (sentence, cost):
        chinese = say_zh(english.capitalized())
        assert untranslated(chinese) == [], chinese
        assert say_zh(english) != english and english == Said(english.template, **english.params)


@pytest.mark.parametrize("poisson", [{"ttfa_p90_s": 1.57, "queue_p90_s": 1.02}, {"continuity_pct": 90.0},
                                     {"ok": 299}])
def test_a_poisson_confirmations_reason_reads_whole_in_chinese(poisson):
    from bench.serving.capacity import confirmation, trust_sentence
    from bench.serving.spec import ServeSpec

    result = {"batching": "continuous", "max_batch": 8, "streams": 8, "floor_streams": 9.6, "floor_rows": 8,
              "lone_speed": 3.2}
    lone = {"batching": "continuous", "max_batch": 8, "users": 1, "ttfa_p50_s": 0.4}
    run = {"rate": 1.17, "requests": 300, "ok": 300, "ttfa_p90_s": 0.7, "continuity_pct": 97.0} | poisson
    result |= confirmation(ServeSpec(tokens=256, confirm_s=300), result, run, [lone])
    why = result["confirm"]["broken_because"]
    assert untranslated(say_zh(why)) == [], say_zh(why)
    sentence = trust_sentence(result)
    assert "not confirmed" in sentence and untranslated(say_zh(sentence)) == [], say_zh(sentence)


def test_serving_and_sweep_sentences_read_in_chinese():
    from chattts_lab.history.compare import Drift, Ratio
    from bench.serving.capacity import capacity_gain
    from bench.serving.summaries import batching_gain
    from chattts_lab.sweep.interleave import plan_sentence

    level = {"batching": "request", "users": 4, "ok": 4, "audio_s_per_s": 1.0, "latency_p90_s": 2.0,
             "ttfa_p90_s": 1.0, "ttfa_p99_s": 1.2, "ttfa_p50_s": 0.5}
    levels = [{**level, "max_batch": 1}, {**level, "max_batch": 4, "audio_s_per_s": 2.5},
              {**level, "max_batch": 4, "users": 1}]
    sentences = [batching_gain(levels, 4), Drift(None, 10.0).sentence(), Drift(3.0, 10.0).sentence(),
                 Drift(30.0, 10.0).sentence(), plan_sentence(3, 4, 4, 8000, 900), plan_sentence(3, 4, 1, 2000, 900),
                 capacity_gain([{"batching": "continuous", "streams": 1}, {"batching": "request", "streams": 0}]),
                 capacity_gain([{"batching": "continuous", "streams": 9}, {"batching": "request", "streams": 2}]),
                 Ratio(2.0, 1.8, 2.2).phrase("lab int8", "stock fp32"), Ratio(0.5, 0.4, 0.6).phrase(),
                 Ratio(1.0, 0.9, 1.1).phrase(), Ratio(1.2, None, None).phrase()]
    for english in sentences:
        chinese = say_zh(english)
        assert isinstance(english, Said) and untranslated(chinese) == [], (english, chinese)
    assert batching_gain(levels, 4).startswith("4 users at once, batches of up to 4 against one at a time: 2.50x")


def cells(**changes) -> pd.DataFrame:
    row = {"status": "ok", "rtf": 0.5, "batch_size": 1, "peak_rss_mb": 900.0, "latency_p50_s": 1.2, "tokens": 32,
           "device": "cpu", "engine": "lab", "precision": "int8", "threads": 2, "step_ms": 10.0, "floor_step_ms": 5.0,
           "weight_mb_per_step": 189.0, "mem_read_gbps": 30.0, "roofline": 0.5}
    return pd.DataFrame([row, {**row, "rtf": 2.0, "engine": "stock", "precision": "fp32", "peak_rss_mb": 2000.0},
                         *([{**row, **changes}] if changes else [])])


def test_recommendations_and_the_served_default_read_in_chinese():
    from chattts_lab.history.recommend import recommend, recommend_within_quality
    from chattts_lab.serve.runtime import _before_any_sweep, default_settings

    reasons = [recommend(cells()).reason, recommend(cells(), 1000).reason, recommend(cells(), 100).reason,
               recommend(pd.DataFrame()).reason, recommend(cells(batch_size=4)).reason,
               recommend_within_quality(cells()).reason, _before_any_sweep(default_settings()).reason]
    for english in reasons:
        chinese = say_zh(english)
        assert isinstance(english, Said) and untranslated(chinese) == [], (english, chinese)
    assert recommend(cells(), 1000).reason.startswith("**cpu · lab · int8 · 2 threads**: RTF 0.50 (2.0× faster than "
                                                      "real time), p50 latency 1.20 s for 32 tokens, peak RSS 900 MB")


def test_english_browsers_get_the_english_text_untouched():
    from webui.i18n.texts import localized, translator

    said = Said("Sweep {sweep} {note}.", sweep=3, note="finished")
    assert localized(said, EN_REQUEST) == "Sweep 3 finished." and localized(said, None) == "Sweep 3 finished."
    assert translator(EN_REQUEST)("Throughput vs latency") == "Throughput vs latency"
    assert say_zh(said) == "扫描 3 已完成。"


def figure_texts(fig) -> list[str]:
    """Every text a figure draws: title, axis titles, legend title and entries, annotations."""
    layout = fig.layout
    texts = [layout.title.text, layout.legend.title.text, *[a.text for a in layout.annotations]]
    texts += [axis.title.text for name in dir(layout) if re.fullmatch(r"[xy]axis\d*", name)
              for axis in [getattr(layout, name)] if axis is not None]
    texts += [trace.name for trace in fig.data]
    return [t for t in texts if t]


def test_the_plots_are_drawn_in_chinese_for_a_chinese_browser():
    from chattts_lab.history import plots
    from chattts_lab.history import figures
    from webui.i18n.texts import translator

    say = translator(ZH_REQUEST)
    df = cells().assign(sweep_id=1, machine="m", compile=False, stream=False, peak_device_mb=None, ttfa_s=None,
                        latency_std_s=0.1, audio_s_per_s=2.0)
    empty = df.iloc[0:0]
    figs = [*figures.all_figures(df, None, say).values(), *figures.all_figures(empty, "还没有", say).values(),
            plots.compare_machines(df, "rtf", say), plots.serving_latency(pd.DataFrame(), say),
            plots.serving_throughput(pd.DataFrame(), say), plots.capacity_curve([], say),
            plots.rtf_vs_quality(df, "quality_mos", say)]
    left = [t for fig in figs for t in figure_texts(fig) if untranslated(re.sub(r"<[^>]+>", "\n", t))]
    assert left == [], left
    english = figures.all_figures(df)["latency"]
    assert english.layout.title.text == "Latency vs batch size"
