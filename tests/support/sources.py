"""The product's source files, as the tests that read source (sizes, one place per idea, docstrings) scan them."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = sorted([ROOT / "app.py", *(p for folder in ("bench", "chattts_lab", "webui") for p in (ROOT / folder).rglob("*.py"))])
