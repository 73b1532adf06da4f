"""Kernel levels side by side in one sweep (`--kernel-level`): the lab's cells once per level, each built and run at
that level in its own worker and recorded as such; engines without kernels of their own once; a level this CPU
cannot run a row with the reason. Real workers, tiny synthetic weights, a real SQLite file."""

from __future__ import annotations

import pytest

from chattts_lab import engines
from chattts_lab.engines.lab import cpu
from chattts_lab.sweep.spec import SpecError, SweepSpec, cell_rule
from tests.conftest import TINY


def test_levels_multiply_the_lab_cells_only():
    spec = SweepSpec(model=TINY, engines=("stock", "lab", "onnx"), precisions=("int8",), kernel_levels=("avx2", "portable"))
    cells = spec.expand()
    assert [(c.engine, c.kernel_level) for c in cells] == [("stock", None), ("lab", "avx2"), ("lab", "portable"),
                                                          ("onnx", None)]
    assert len({c.key for c in cells}) == 4 and "avx2 kernels" in cells[1].label
    assert SweepSpec(model=TINY, engines=("lab",)).expand()[0].kernel_level is None  # default: the CPU's best


def test_an_unknown_level_is_refused_and_one_this_cpu_cannot_run_is_a_row(monkeypatch):
    with pytest.raises(SpecError, match="unknown kernel level 'avx3': choose from avx512_vnni, avx_vnni, avx2, portable"):
        SweepSpec(model=TINY, engines=("lab",), kernel_levels=("avx3",)).validate()
    # FAKE CPU flags: an AVX2-only machine asked for the AVX-512 kernels
    monkeypatch.setattr(cpu, "detect", lambda: cpu.CpuFeatures(frozenset({"avx2", "fma", "f16c"})))
    cell = SweepSpec(model=TINY, engines=("lab",), kernel_levels=("avx512_vnni",)).expand()[0]
    assert cell_rule(cell) == ("unsupported", "this CPU cannot run the avx512_vnni kernels (it runs avx2, portable)")


def test_a_sweep_measures_each_level_and_records_what_ran(tmp_path):
    from chattts_lab.history.store import Store
    from chattts_lab.sweep.runner import SweepFinished, run_sweep

    levels = ("avx2", "portable")
    if any(engines.kernel_level_reason(level) for level in levels):
        pytest.skip("this CPU runs neither AVX2 nor the portable level")
    spec = SweepSpec(model=TINY, engines=("lab",), precisions=("int8",), tokens=(4,), threads=(1,), repeats=1,
                     warmup=0, min_time_s=0, fidelity=False, passes=1, kernel_levels=levels)
    final = [e for e in run_sweep(spec, tmp_path / "lab.sqlite") if isinstance(e, SweepFinished)][0]
    assert [r.status for r in final.results] == ["ok", "ok"], [r.reason for r in final.results]
    ran = [r.effective["kernels"] for r in final.results]
    assert ran[0].startswith("lab-int8 avx2; fused-decode avx2") and ran[1].startswith("lab-int8 portable; ")
    with Store(tmp_path / "lab.sqlite") as store:
        keys = [row["cell_key"] for row in store.conn.execute("SELECT cell_key FROM cells ORDER BY idx")]
    assert keys[0].endswith("|isa=avx2") and keys[1].endswith("|isa=portable")


def test_tables_show_the_kernels_when_one_configuration_ran_at_several_levels():
    import pandas as pd

    from chattts_lab.history.report import shown_columns

    row = dict(engine="lab", device="cpu", precision="int8", batch_size=1, threads=2, tokens=128, stream=False)
    two_levels = pd.DataFrame([{**row, "kernels": "lab-int8 avx512_vnni; ..."}, {**row, "kernels": "lab-int8 avx2; ..."}])
    assert shown_columns(two_levels)[0] == "kernels"
    one_level = pd.DataFrame([{**row, "kernels": "lab-int8 avx2; ..."}, {**row, "precision": "int4", "kernels": "x"}])
    assert "kernels" not in shown_columns(one_level)


def test_bf16_is_native_only_where_onednn_may_use_it(monkeypatch):
    """FAKE CPU flags: a bf16 CPU whose oneDNN is capped below bf16 (ONEDNN_MAX_CPU_ISA=AVX2, how an AVX2 machine is
    imitated) emulates bf16, so the decoder's and vocoder's projections must stay fp32 there."""
    bf16_cpu = cpu.CpuFeatures(frozenset({"avx2", "avx512f", "avx512_bf16"}))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert bf16_cpu.native_bf16 and not cpu.CpuFeatures(frozenset({"avx2"})).native_bf16
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not bf16_cpu.native_bf16
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_bf16")
    assert bf16_cpu.native_bf16
