"""One place for each idea, held on the product's source: one reader of the CPU, one HTTP client library."""

import ast
from pathlib import Path

from chattts_lab.engines.lab import cpu, kernels
from chattts_lab.trackers import env
from tests.support.sources import PRODUCT, ROOT


def _strings(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_one_module_reads_the_cpu():
    readers = [str(p.relative_to(ROOT)) for p in PRODUCT if any("/proc/cpuinfo" in s for s in _strings(p))]
    assert readers == ["chattts_lab/trackers/env.py"]


def test_the_kernel_level_the_build_name_and_the_recorded_environment_see_the_same_cpu(monkeypatch):
    """Each reads env.this_cpu: a CPU told to have AVX2 only is AVX2 only for all of them."""
    avx2_only = env.Cpu("Test CPU", frozenset({"avx2", "fma", "f16c", "sse4_2"}))
    monkeypatch.setattr(env, "this_cpu", lambda: avx2_only)
    monkeypatch.setattr(cpu, "this_cpu", lambda: avx2_only)
    monkeypatch.setattr(kernels, "this_cpu", lambda: avx2_only)
    assert cpu.detect().flags == avx2_only.flags
    assert env.cpu_info()["flags"] == ["avx2", "fma", "f16c"] and env.cpu_info()["model"] == "Test CPU"
    name = kernels._build_name("source", "avx2", [])
    monkeypatch.setattr(kernels, "this_cpu", lambda: env.Cpu("Test CPU", avx2_only.flags | {"avx512f"}))
    assert kernels._build_name("source", "avx2", []) != name


def test_the_cpu_is_read_once_per_process():
    assert env.this_cpu() is env.this_cpu()
    assert env.this_cpu().flags and env.this_cpu().model


HTTP_CLIENTS = {"urllib.request", "http.client", "requests", "aiohttp", "urllib3", "httpx"}


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_the_product_speaks_http_with_one_client_library():
    """httpx only (the serving benchmark's client, streaming included); the servers are FastAPI's and Gradio's."""
    used = {name for path in PRODUCT for name in _imported(path) & HTTP_CLIENTS}
    assert used == {"httpx"}
