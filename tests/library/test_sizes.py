"""No product module over 400 lines and no function over 50 (issue 42's targets), over app.py, bench/, chattts_lab/
and webui/: a module or a function that grows past them is split before it lands."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.sources import PRODUCT, ROOT

MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 50


def long_modules(paths, root: Path = ROOT) -> list[tuple[str, int]]:
    lengths = ((p, len(p.read_text(encoding="utf-8").splitlines())) for p in paths)
    return [(str(p.relative_to(root)), n) for p, n in lengths if n > MAX_MODULE_LINES]


def long_functions(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Functions (methods and nested ones included) longer than the bound, decorators and docstring counted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(f"{path.relative_to(root)}:{node.lineno} {node.name}", node.end_lineno - start + 1)
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for start in [min([node.lineno, *(d.lineno for d in node.decorator_list)])]
            if node.end_lineno - start + 1 > MAX_FUNCTION_LINES]


def test_no_product_module_is_over_400_lines():
    assert long_modules(PRODUCT) == []


def test_no_product_function_is_over_50_lines():
    assert [f for path in PRODUCT for f in long_functions(path)] == []


def test_the_size_checks_see_a_long_module_and_a_long_function(tmp_path):
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    made = tmp_path / "made.py"
    made.write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n" + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    assert long_modules([made], tmp_path) == [("made.py", MAX_MODULE_LINES + MAX_FUNCTION_LINES + 5)]
    assert long_functions(made, tmp_path) == [("made.py:5 long", MAX_FUNCTION_LINES + 1)]
