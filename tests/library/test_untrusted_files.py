"""Untrusted files are data: no code path unpickles, `torch.load`s, evals or shells out on user input."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("chattts_lab/**/*.py"), *ROOT.glob("webui/**/*.py"), *ROOT.glob("bench/**/*.py"),
                  ROOT / "app.py"])
FORBIDDEN_CALLS = {"pickle.load", "pickle.loads", "torch.load", "eval", "exec", "yaml.load", "marshal.loads",
                   "shelve.open", "dill.load", "joblib.load"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_deserialisation_or_shell_in_the_code(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name in FORBIDDEN_CALLS:
                problems.append(f"line {node.lineno}: {name}()")
            for kw in node.keywords:
                if kw.arg in ("allow_pickle", "shell") and isinstance(kw.value, ast.Constant) and kw.value.value:
                    problems.append(f"line {node.lineno}: {name}({kw.arg}=True)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            problems += [f"line {node.lineno}: imports {n}" for n in names if n in ("pickle", "dill", "shelve", "marshal")]
    assert problems == [], f"{path.relative_to(ROOT)}: {problems}"


def test_a_pickled_voice_card_or_bundle_is_refused_as_data(tmp_path):
    import pickle

    from chattts_lab.history.bundle import BundleError, read_bundle
    from chattts_lab.voices import InvalidVoiceCard, parse_card

    class Boom:
        def __reduce__(self):
            return (Path(tmp_path / "pwned").touch, ())

    payload = pickle.dumps(Boom())
    with pytest.raises(InvalidVoiceCard, match="not UTF-8|not valid JSON"):
        parse_card(payload)
    (tmp_path / "bundle.json").write_bytes(payload)
    with pytest.raises(BundleError, match="not a JSON bundle"):
        read_bundle(tmp_path / "bundle.json")
    assert not (tmp_path / "pwned").exists()
