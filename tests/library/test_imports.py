"""The library's imports run one way: results <- store, report <- the runner; the library never imports the
command line or the app. Checked on the source (every import, function-level ones included) and by importing
modules alone in fresh interpreters."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chattts_lab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: dict = MODULES) -> set[str]:
    """Every module of ours (or other top-level package) that a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from chattts_lab import metrics` imports the module chattts_lab.metrics
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                      for a in node.names}
    return found


def graph_of(modules: dict) -> dict[str, set[str]]:
    return {name: {m for m in imports_of(path, modules) if m in modules and m != name} for name, path in modules.items()}


GRAPH = graph_of(MODULES)


def _reaches(start: str, goal: str, graph: dict = GRAPH) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return False


def cycles_in(graph: dict) -> list[tuple[str, str]]:
    return [(a, b) for a in graph for b in graph[a] if _reaches(b, a, graph)]


def test_no_module_of_the_library_imports_one_that_imports_it_back():
    assert cycles_in(GRAPH) == []


# The app's side: the web UI, the command lines and the app itself, over the library.
FRONT = {_module_name(p): p for p in [*(ROOT / "webui").rglob("*.py"), *(ROOT / "bench").rglob("*.py"), ROOT / "app.py"]}


def test_no_module_of_the_web_ui_or_the_command_lines_imports_one_that_imports_it_back():
    """webui's Synthesis pieces, bench/cli.py and bench/serving/cli.py included (imports inside functions and under
    TYPE_CHECKING count: a circle they hide still ties the modules together)."""
    assert cycles_in(graph_of(FRONT)) == []


def test_the_circle_check_sees_a_circle():
    assert cycles_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b"), ("b", "c"), ("c", "a")]


def _only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def test_every_module_of_the_web_ui_is_gradio_code():
    """What is not Gradio code lives in the library (the runtime that serves: chattts_lab/serve); a subpackage's
    __init__ only says what its part holds."""
    plain = [name for name, path in FRONT.items() if name.startswith("webui.") and "gradio" not in imports_of(path)
             and not (path.name == "__init__.py" and _only_a_docstring(path))]
    assert plain == []


# The web UI's parts, bottom first: its texts; what both tabs use; each tab; above them the MCP tools (over both
# tabs) and app.py. An arrow runs down only: a part imports its own modules and those of the parts below it.
WEBUI_PARTS = {"webui.i18n": set(), "webui.common": {"webui.i18n"},
               "webui.synthesis": {"webui.i18n", "webui.common"}, "webui.benchmark": {"webui.i18n", "webui.common"}}


def _webui_part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def upward_arrows(graph: dict) -> list[tuple[str, str]]:
    """Imports by a module of a web UI part of a web UI module outside that part and the parts below it."""
    return sorted((m, n) for m in graph if _webui_part(m) in WEBUI_PARTS for n in graph[m]
                  if n.startswith("webui") and _webui_part(n) not in WEBUI_PARTS[_webui_part(m)] | {_webui_part(m)})


def test_each_part_of_the_web_ui_imports_only_itself_and_the_parts_below_it():
    graph = graph_of(FRONT)
    assert set(WEBUI_PARTS) <= {_webui_part(m) for m in FRONT if m.count(".") >= 2}  # the parts exist
    assert upward_arrows(graph) == []
    assert not any(n == "app" for m in graph if m.startswith("webui") for n in graph[m])


def test_the_parts_check_sees_an_arrow_back_up():
    """The Synthesis tab importing the Benchmark tab's form, or the texts importing what shows them, is refused."""
    graph = {"webui.synthesis.tab": {"webui.common.events", "webui.benchmark.sweep_form"},
             "webui.i18n.texts": {"webui.common.present"}}
    assert upward_arrows(graph) == [("webui.i18n.texts", "webui.common.present"),
                                    ("webui.synthesis.tab", "webui.benchmark.sweep_form")]


@pytest.mark.parametrize("module, must_not_reach", [
    ("chattts_lab.sweep.results", ["chattts_lab.history.store", "chattts_lab.history.report", "chattts_lab.sweep.runner", "chattts_lab.sweep.spec"]),
    ("chattts_lab.history.store", ["chattts_lab.sweep.runner", "chattts_lab.history.report", "chattts_lab.sweep.grid"]),
    ("chattts_lab.history.report", ["chattts_lab.sweep.runner", "chattts_lab.history.store", "chattts_lab.sweep.grid"]),
    ("chattts_lab.sweep.grid", ["chattts_lab.sweep.runner", "chattts_lab.history.report"]),
])
def test_the_types_do_not_depend_on_what_uses_them(module, must_not_reach):
    assert [m for m in must_not_reach if _reaches(module, m)] == []


def test_the_runner_uses_types_store_and_spec():
    assert {"chattts_lab.sweep.results", "chattts_lab.history.store", "chattts_lab.sweep.spec"} <= GRAPH["chattts_lab.sweep.runner"]


def test_the_library_never_imports_the_command_line_or_the_app():
    outside = {m for path in MODULES.values() for m in imports_of(path)
               if m.split(".")[0] in ("bench", "webui", "app", "gradio")}
    assert outside == set()


@pytest.mark.parametrize("module, absent", [
    ("chattts_lab.sweep.results", ["chattts_lab.history.store", "chattts_lab.sweep.runner"]),
    ("chattts_lab.history.store", ["chattts_lab.sweep.runner", "chattts_lab.history.report"]),
    ("chattts_lab.history.report", ["chattts_lab.sweep.runner", "chattts_lab.history.store"]),
    ("chattts_lab.sweep.grid", ["chattts_lab.sweep.runner", "chattts_lab.history.report"]),
    ("chattts_lab.sweep.runner", []),
    ("chattts_lab.serve.openai_api", ["gradio", "chattts_lab.sweep.runner"]),  # the /v1 route serves without Gradio
    # the command lines import ChatTTS (4 s of a fresh process's CPU) only when a model loads: `bench list` never does
    ("bench.cli", ["ChatTTS", "transformers"]),
    ("bench.serving.cli", ["ChatTTS", "transformers"]),
    ("chattts_lab.serve.rayserve", ["ChatTTS", "transformers", "gradio"]),  # its --stop and --help alike
])
def test_each_module_imports_alone_in_a_fresh_interpreter(module, absent):
    """A circle held together by imports inside functions would show here as a module that cannot load first."""
    check = f"import sys, {module}; print([m for m in {absent!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# The layers between packages (README: the layout): what a package may not reach, imports inside functions included.
# The core (models, synthesis, requests, voices, audio) and the engines know nothing of sweeps, history or serving;
# trackers measure and know neither; the history keeps sweeps' types, never runs one; a sweep never serves, and the
# runtime that serves never runs a sweep (both reach a Ray cluster through chattts_lab.ray_connect).

def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


CORE = ("chattts_lab.models", "chattts_lab.synthesis", "chattts_lab.requests", "chattts_lab.voices",
        "chattts_lab.audio", "chattts_lab.devices", "chattts_lab.limits", "chattts_lab.metrics", "chattts_lab.synthetic")
RUNNERS = ("chattts_lab.sweep.runner", "chattts_lab.sweep.interleave", "chattts_lab.sweep.fleet",
           "chattts_lab.sweep.supervisor")


@pytest.mark.parametrize("layer, above", [
    (CORE, ("chattts_lab.sweep", "chattts_lab.history", "chattts_lab.serve")),
    (("chattts_lab.engines",), ("chattts_lab.sweep", "chattts_lab.history", "chattts_lab.serve")),
    (("chattts_lab.trackers",), ("chattts_lab.history", "chattts_lab.serve") + RUNNERS),
    (("chattts_lab.history",), ("chattts_lab.serve",) + RUNNERS),
    (("chattts_lab.sweep",), ("chattts_lab.serve",)),
    (("chattts_lab.serve",), ("chattts_lab.sweep",)),
    (("chattts_lab.ray_connect",), ("chattts_lab.sweep", "chattts_lab.serve")),
])
def test_no_package_reaches_a_layer_above_it(layer, above):
    mine = [m for m in GRAPH if m in layer or _package(m) in layer]
    assert mine, layer  # the layer exists (a rename would otherwise pass this test by emptying it)
    wrong = sorted({(m, n) for m in mine for n in GRAPH[m] if n in above or _package(n) in above})
    assert wrong == []


def test_serving_reaches_engines_only_through_the_registry_and_the_interface():
    """Continuous batching runs on whatever engine gives a row decoder (EngineRuntime.row_decoder), so nothing under
    chattts_lab/serve imports an engine's own modules (the lab's rows, its streaming spans)."""
    interface = {"chattts_lab.engines", "chattts_lab.engines.base"}
    reached = {(name, m) for name, path in MODULES.items() if name.startswith("chattts_lab.serve")
               for m in imports_of(path) if m.startswith("chattts_lab.engines") and m not in interface}
    assert reached == set()
