"""The page in English and Simplified Chinese (gr.I18n: the browser's language picks; Settings, at the page's foot,
switches it).

A key is the English text itself, so the English page reads as before and a text not translated yet stays English
(tests/test_browser_i18n.py lists what is left). Translated so far: the header, the tab names and the Synthesis
tab's labels, help texts and buttons. Not yet: the Benchmark tab, and messages made at run time (warnings, the
metrics line, banners), which gr.I18n cannot translate: they are written per request, in English.
"""

from __future__ import annotations

import gradio as gr

from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND

ZH = {
    # the page
    "Try ChatTTS voices and measure how fast they run on this machine.":
        "试听 ChatTTS 的音色，并测量它在这台机器上的运行速度。",
    "Synthesis": "语音合成",
    "Benchmark": "基准测试",
    # text
    "Text": "文本",
    "Inline control tokens work: [uv_break] [laugh] [lbreak]": "文本中可使用控制标记：[uv_break] [laugh] [lbreak]",
    "Examples": "示例",
    "Generate": "生成",
    "Interrupt": "中断",
    "Stream (play while generating)": "流式（边生成边播放）",
    "Split long text into sentences (batched)": "长文本按句拆分（批量生成）",
    # voice
    "Voice": "音色",
    "Voice from": "音色来源",
    "Seed / preset": "种子 / 预设",
    "Speaker string": "说话人字符串",
    "Sample audio": "样本音频",
    "Preset voice": "预设音色",
    "a named seed: the same voice every time (noise on random weights)":
        "有名字的种子：每次都是同一个音色（随机权重下是噪声）",
    "Saved voice": "已保存的音色",
    "cards saved to the voice library": "保存在音色库中的音色卡",
    "Voice seed": "音色种子",
    "Random voice": "随机音色",
    "Speaker embedding (copy / paste)": "说话人嵌入（复制 / 粘贴）",
    "paste a speaker string to reuse a voice": "粘贴说话人字符串即可复用音色",
    "Show the speaker string for this seed": "显示此种子的说话人字符串",
    "Sample clip (voice from a recording)": "样本音频（从录音中取音色）",
    "Transcript of the clip": "音频的文字稿",
    # voice card
    "Voice card: export / import": "音色卡：导出 / 导入",
    "A small JSON with the speaker embedding, seeds and parameters: the voice reproduces on another machine. Saved "
    "cards are also voices for the OpenAI-compatible endpoint.":
        "一个小 JSON 文件，包含说话人嵌入、种子和参数：在另一台机器上也能复现同一个音色。保存的音色卡也可作为 "
        "OpenAI 兼容接口的音色。",
    "Voice name": "音色名称",
    "Export voice card": "导出音色卡",
    "Save to voice library": "保存到音色库",
    "Voice card (download)": "音色卡（下载）",
    "Import a voice card": "导入音色卡",
    # sampling
    "Sampling": "采样",
    "Temperature": "温度",
    "Sampling seed": "采样种子",
    "blank: random": "留空：随机",
    "Text seed (refine)": "文本种子（润色）",
    "Speed": "语速",
    "Refine text first": "先润色文本",
    "Oral": "口语化",
    "Laugh": "笑声",
    "Break": "停顿",
    f"Max audio tokens ({STEPS_PER_AUDIO_SECOND:.1f} per second)":
        f"最大音频 token 数（每秒 {STEPS_PER_AUDIO_SECOND:.1f} 个）",
    "Min audio tokens": "最小音频 token 数",
    # runtime
    "Runtime": "运行配置",
    "Device": "设备",
    "Engine": "引擎",
    "Precision": "精度",
    "Threads": "线程数",
    "Apply the best configuration from the benchmark": "应用基准测试推荐的最佳配置",
    # results
    "Stream": "流式播放",
    "Audio": "音频",
    "Audio (the whole stream: play it again or download it)": "音频（完整的流式结果：可重播或下载）",
    "Raw measurements (JSON)": "原始测量数据（JSON）",
    "Measurements": "测量数据",
}

# Browsers say zh-CN (or zh); both read the same texts. English is the keys themselves.
I18N = gr.I18n(en={key: key for key in ZH}, zh=ZH, **{"zh-CN": ZH})


def t(english: str):
    """`english` as a translatable text where a translation exists; otherwise the English text as it is."""
    return I18N(english) if english in ZH else english
