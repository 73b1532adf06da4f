"""Nothing outside `chattts_lab/engines/` names an engine or re-derives a precision: it asks the registry
(`engines.REFERENCE`, `engines.DEFAULT_ENGINE`, `Engine.precisions`) or the precision table (`engines.PRECISION`).
Checked on the source: an engine's name as a string, a literal collection of precision names (a tuple, list or
set of them, or a dict keyed by them), or an import of one engine's own modules, anywhere in the library, the
command line, the web UI or the app.
"""

import ast
from pathlib import Path

import pytest
import torch

from chattts_lab import engines

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [*(ROOT / "chattts_lab").rglob("*.py"), *(ROOT / "bench").rglob("*.py"), *(ROOT / "webui").rglob("*.py"),
           ROOT / "app.py"]
ENGINES_PACKAGE = ROOT / "chattts_lab" / "engines"
# To do: files that still name an engine. None is left; nothing may be added here.
NOT_YET: set[str] = set()


# an engine's own package or module: reached through the registry only (`engines.get(name)`)
ONE_ENGINE = [["chattts_lab", "engines", name] for name in engines.ENGINES]


def leaks(source: str) -> list[str]:
    """Each engine name written as a string, and each literal collection of precision names, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in engines.ENGINES:
            found.append(f"line {node.lineno}: engine name {node.value!r}")
        names = (node.keys if isinstance(node, ast.Dict) else node.elts
                 if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
        if names and all(isinstance(n, ast.Constant) and n.value in engines.PRECISIONS for n in names):
            found.append(f"line {node.lineno}: precisions {[n.value for n in names]}")
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"line {node.lineno}: imports {m}" for m in modules if m.split(".")[:3] in ONE_ENGINE]
    return found


def _scanned() -> list[Path]:
    return [p for p in SCANNED if ENGINES_PACKAGE not in p.parents and str(p.relative_to(ROOT)) not in NOT_YET]


def test_nothing_outside_the_engines_names_an_engine_or_lists_precisions():
    found = {str(p.relative_to(ROOT)): leaks(p.read_text()) for p in _scanned()}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_the_allow_list_names_only_files_that_exist():
    assert all((ROOT / path).exists() for path in NOT_YET)  # a moved file must leave the list, not hide a new one


@pytest.mark.parametrize("source", [
    'engine = "lab"',
    'if cfg.engine == "onnx": pass',
    'QUANTIZED = ("int8", "int4")',
    'if precision in ["fp16", "bf16"]: pass',
    'SLOPE = {"fp32": 0.3, "int8": 0.14}',
    'DEFAULTS = ("fp32",)',
    'from chattts_lab.engines.lab.continuous import RowDecoder',
    'import chattts_lab.engines.onnx.session',
])
def test_the_scan_finds_a_leak(source):
    assert leaks(source)


@pytest.mark.parametrize("source", [
    'engine = engines.DEFAULT_ENGINE',
    'precision = "fp32"',  # one precision as a default is a value, not a re-derived meaning
    'help = "stock, lab or onnx"',
    'pair = (device, "fp32", 3)',
    'from chattts_lab.engines import REFERENCE',
    'from chattts_lab.engines.precisions import PRECISION',
])
def test_the_scan_passes_what_is_not_a_leak(source):
    assert leaks(source) == []


def test_the_precision_table_covers_every_precision_every_engine_runs():
    assert engines.PRECISIONS == tuple(engines.PRECISION)
    assert {p for e in engines.all_engines() for p in e.precisions} == set(engines.PRECISIONS)
    assert engines.QUANTIZED == ("int8", "int4")
    assert engines.PRECISION["bf16"].compute_dtype == torch.bfloat16
    assert all(p.quality_cost and p.batch_slope > 0 for p in engines.PRECISION.values())


def test_a_precision_no_engine_offers_is_estimated_as_the_reference():
    assert engines.precision_of("int3") == engines.PRECISION[engines.DEFAULT_PRECISION]


# ---- continuous batching is asked of the engine: one method, no name


@pytest.fixture(scope="module")
def tiny_models():
    """(engine, its tiny fp32 model) for every registered engine, loaded side by side."""
    from chattts_lab import models
    from tests.conftest import TINY

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "MAX_CACHED", len(engines.ENGINES) + 1)
        yield {e: models.load_model(models.LoadConfig(model=TINY, engine=e, precision="fp32", threads=1))
               for e in engines.ENGINES}
    models.unload_all()


def test_an_engine_says_it_cannot_batch_continuously_exactly_when_its_runtime_gives_no_row_decoder(tiny_models):
    for name, model in tiny_models.items():
        reason = engines.get(name).continuous_batching_reason
        decoder = model.engine.row_decoder(model.chat, 2)
        assert (reason is None) == (decoder is not None), (name, reason, decoder)


def test_a_registered_engine_with_a_row_decoder_batches_continuously_with_no_name_outside_the_engines(monkeypatch):
    """A new engine (here the lab's loop under a name nothing outside engines/ has ever seen) gives a row decoder and
    no reason against it: the serving choice and the continuous scheduler take it as they take lab or onnx."""
    import threading

    from chattts_lab import models
    from chattts_lab.engines.lab import LabEngine
    from chattts_lab.requests import SynthesisRequest
    from chattts_lab.serve.batch import Part
    from chattts_lab.serve.policy import SchedulerPolicy, scheduling_for
    from chattts_lab.serve.scheduler import ContinuousScheduler
    from tests.conftest import TINY

    class RowsEngine(LabEngine):
        name = "rows"

        def install(self, chat, device, precision, *, compile, threads):
            runtime = super().install(chat, device, precision, compile=compile, threads=threads)
            runtime.name = self.name
            return runtime

    registry = {**engines._registry(), "rows": RowsEngine()}
    monkeypatch.setattr(engines, "ENGINES", tuple(registry))
    monkeypatch.setattr(engines, "_registry", lambda: registry)
    assert scheduling_for("continuous", "rows") == "continuous"
    model = models.load_model(models.LoadConfig(model=TINY, engine="rows", precision="fp32", threads=1))
    try:
        scheduler = ContinuousScheduler(lambda: model, SchedulerPolicy(max_rows=2, max_queue=2))
        parts = [Part(SynthesisRequest.of(text, max_new_token=8, min_new_token=8), threading.Event())
                 for text in ("Hello.", "Hello again.")]
        outputs = [f.result(timeout=600) for f in [scheduler.submit(p) for p in parts]]
        assert [o.measurements.scheduling for o in outputs] == ["continuous"] * 2
        assert [o.measurements.tokens for o in outputs] == [[8]] * 2
        assert outputs[0].measurements.effective["engine"] == "rows"
    finally:
        models.unload_all()
