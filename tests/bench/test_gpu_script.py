"""scripts/gpu/sweep.sh, the one prepared command for a lent GPU, checked here where there is no GPU.

The GPU's numbers cannot be checked here. What can: the reasons its rule rows will give, and (opt-in, `-m slow`:
the script starts four Python processes, about 25 s) that `python -m bench` accepts the script's arguments, every
cell of its grid comes back as a row with a reason, and the bundle it writes is one that `--import` accepts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chattts_lab.engines import unsupported_reason
from chattts_lab.history.bundle import import_bundle
from chattts_lab.history.store import Store

ROOT = Path(__file__).resolve().parents[2]


def test_stock_int8_on_a_gpu_is_a_row_that_says_its_kernels_are_cpu_only():
    """Three rows of the GPU sweep; asking needs no GPU (the rule reads the device's type)."""
    assert "CPU kernels only" in unsupported_reason("stock", torch.device("cuda"), "int8")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the script where no GPU exists (with one, it measures)")
def test_the_gpu_sweep_without_a_gpu_writes_a_bundle_whose_36_rows_say_why(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), CHATTTS_LAB_GPU_DRY="1", CHATTTS_LAB_GPU_WORK=str(tmp_path / "work"),
               PYTHON=sys.executable)
    run = subprocess.run(["bash", "scripts/gpu/sweep.sh", "--device", "cuda"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    bundle = out / "sweep-dry-tiny.json"
    new, _ = import_bundle(tmp_path / "mine.sqlite", bundle)  # what `python -m bench --import` calls
    with Store(tmp_path / "mine.sqlite") as store:
        rows = store.results(new[0], with_samples=False)
        notes = store.notes(new[0])
    assert len(rows) == 3 * 4 * 3  # engines x precisions x batches
    assert {r.status for r in rows} == {"skipped"} and all("not present" in r.reason for r in rows)
    assert notes["device_check"]["bandwidth"] == {"status": "skipped", "reason": "no CUDA device here"}
    assert (out / "results.html").is_file() and "stock" in (out / "sweep.log").read_text()
    assert json.loads((out / "machine.json").read_text())["checkpoint"]["status"] == "ok"


GPU_SCRIPTS = ROOT / "scripts" / "gpu"
# What a sweep cell imports at module level (the engines load ChatTTS, transformers' Llama and vocos when they run).
CELL_IMPORTS = ("import bench.cli, chattts_lab.sweep.worker, chattts_lab.engines.lab, chattts_lab.engines.stock, "
                "ChatTTS, vocos, soundfile, transformers.models.llama.modeling_llama")


def _import_as_on_the_gpu(gpu_scripts: Path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{gpu_scripts / 'image_only'}{os.pathsep}{ROOT}")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_what_a_gpu_sweep_cell_imports_is_in_the_image_or_carried():
    """The carried wheels (scripts/gpu/carried.txt) cover what the image lacks; a miss once cost a lease's first try."""
    run = _import_as_on_the_gpu(GPU_SCRIPTS, CELL_IMPORTS)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_wheel_left_out_of_the_carried_list_fails_the_dry_run_here(tmp_path):
    shutil.copytree(GPU_SCRIPTS / "image_only", tmp_path / "image_only")
    shutil.copy(GPU_SCRIPTS / "image_packages.txt", tmp_path)
    carried = (GPU_SCRIPTS / "carried.txt").read_text().splitlines()
    (tmp_path / "carried.txt").write_text("\n".join(x for x in carried if not x.startswith("pydantic==")))

    run = _import_as_on_the_gpu(tmp_path, "import bench.cli")
    assert run.returncode != 0 and "No module named 'pydantic'" in run.stderr
