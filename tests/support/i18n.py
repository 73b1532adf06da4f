"""Reading a text that should be Chinese: what is left in English (the sentence tests and the browser walk in zh-CN
share it)."""

from __future__ import annotations

import re

# Names and units a Chinese sentence keeps as they are.
KEPT = {"stock", "lab", "onnx", "fp32", "int8", "int4", "bf16", "cpu", "RTF", "GPT", "MOS", "WER", "RSS", "MB", "GB",
        "p50", "p90", "p99", "max", "users", "ChatTTS", "AVX", "VNNI", "DNSMOS", "roofline", "token", "threads"}


def english_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Za-z][A-Za-z0-9_-]{2,}", text) if w not in KEPT and not w.startswith("--")]


def untranslated(chinese: str) -> list[str]:
    """The pieces of a Chinese text (split at its sentence marks) with English words and no Chinese."""
    pieces = re.split(r"[。；：\n]", chinese)
    return [p for p in pieces if english_words(p) and not re.search(r"[\u4e00-\u9fff]", p)]
