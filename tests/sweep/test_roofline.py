"""The roofline: a sweep measures its device's read bandwidth once, every ok row carries the weight bytes a
decode step reads (checked against the checkpoint's own tensor shapes), the floor that read takes at that
bandwidth and floor / step; failed rows leave them empty; old databases, bundles, reports, the figure and
the recommendation carry them. No timing bounds: only that a bandwidth is a positive, finite number."""

import math
import re
import statistics
import sqlite3
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from chattts_lab import metrics

from chattts_lab.trackers import roofline

from chattts_lab.sweep import interleave
from chattts_lab.sweep import runner as sweep
from chattts_lab.history.plots import REPORT_FIGURES, roofline_by_config
from chattts_lab.history.recommend import recommend
from chattts_lab.history.report import bandwidth_lines, html_report, markdown_table, results_frame
from chattts_lab.sweep.results import CellResult, RunConfig, summarize
from chattts_lab.sweep.spec import SweepSpec
from chattts_lab.history.bundle import export_bundle, import_bundle
from chattts_lab.history.frames import cells_frame
from chattts_lab.history.schema import SCHEMA_VERSION
from chattts_lab.history.store import Store
from chattts_lab.synthetic import SyntheticSpec, ensure_checkpoint

DATA = Path(__file__).resolve().parents[1] / "data"
ROOF_COLUMNS = ("weight_mb_per_step", "mem_read_gbps", "floor_step_ms", "roofline")


def _checkpoint_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor the tiny checkpoint holds, read from its files (not from the loaded model)."""
    asset = ensure_checkpoint(SyntheticSpec("tiny")) / "asset"
    shapes = {}
    for name, path in (("gpt", asset / "gpt" / "model.safetensors"), ("embed", asset / "Embed.safetensors")):
        with safe_open(str(path), "pt") as f:
            shapes.update({f"{name}.{k}": tuple(f.get_slice(k).get_shape()) for k in f.keys()})
    return shapes


def _numel(shape) -> int:
    return math.prod(shape)


def expected_stock_bytes(gpt_bytes_per_value: int) -> int:
    """The GPT's layers and final norm at the precision's width (its token embedding table is never read by a
    code step), plus the 4 weight-normed code heads (magnitude and direction), which stay float32."""
    shapes = _checkpoint_shapes()
    gpt = sum(_numel(s) for k, s in shapes.items() if k.startswith("gpt.") and "embed_tokens" not in k)
    heads = sum(_numel(s) for k, s in shapes.items() if k.startswith("embed.head_code."))
    return gpt * gpt_bytes_per_value + heads * 4


def test_read_bandwidth_of_the_cpu_is_the_faster_of_two_readers_and_names_both():
    measured = roofline.read_gbps("cpu", nbytes=64 * 2**20, repeats=2, threads=1)
    assert measured["gbps"] > 0 and math.isfinite(measured["gbps"])
    winner, other = re.fullmatch(r"(.+) over 64 MiB in 1 threads, median of 2 after a warm-up "
                                 r"\(the faster reader; (.+) ([0-9.]+) GB/s\)", measured["method"]).group(1, 2)
    assert {winner, other} == {"numpy float64 sum", "torch float32 sum"}
    assert float(measured["method"].split()[-2]) <= round(measured["gbps"], 1)


def test_the_independent_bandwidth_check_reports_every_reader_and_counts_the_fastest():
    from bench.independent_bandwidth import READERS, measure

    found = measure(procs=2, mib=64, repeats=2)
    assert set(found["gbps_by_reader"]) == set(READERS) and found["reader"] in READERS
    assert found["gbps"] == max(found["gbps_by_reader"].values()) > 0
    assert all(len(walls) == 2 for walls in found["walls_s"].values())


def test_the_read_is_several_times_larger_than_the_last_level_cache():
    cache = roofline.last_level_cache_bytes()
    assert roofline._read_bytes(torch.device("cpu")) >= max(roofline.MIN_READ_BYTES, 4 * (cache or 0))


def test_the_device_reader_used_for_cuda_runs_its_code_on_cpu_here():
    """CUDA itself needs a GPU; the same torch reader (sum, then synchronize) runs on CPU tensors."""
    seconds = roofline._median_seconds(roofline._torch_reader(16 * 2**20, torch.device("cpu")), repeats=2)
    assert seconds > 0 and math.isfinite(seconds)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")
def test_read_bandwidth_of_a_cuda_device_is_measured_on_the_device():
    measured = roofline.read_gbps("cuda")
    assert measured["gbps"] > 0 and "cuda:0" in measured["method"]


def test_an_absent_device_is_left_out_of_the_measurement():
    found = roofline.measure_read_bandwidth(["cpu", "cuda:7"])
    assert set(found["mem_read_gbps"]) == {"cpu"} and set(found["mem_read_method"]) == {"cpu"}


def _counted_sweep(db: Path, passes: int):
    """One real sweep of stock fp32 and bf16 (measured in worker processes) and stock int4 (ruled out: a failed
    row), with each bandwidth measurement it makes (real ones) kept in order."""
    reads = []
    real = sweep.measure_read_bandwidth

    def counting(devices):
        reads.append(real(devices))
        return reads[-1]

    patch = pytest.MonkeyPatch()
    patch.setattr(sweep, "measure_read_bandwidth", counting)
    patch.setattr(interleave, "measure_read_bandwidth", counting)  # the passes' and cells' reads are made there
    try:
        spec = SweepSpec(model="synthetic-tiny", precisions=("fp32", "int4", "bf16"), tokens=(8,), repeats=1,
                         warmup=0, min_time_s=0.0, fidelity=False, passes=passes)
        final = list(sweep.run_sweep(spec, db))[-1]
    finally:
        patch.undo()
    return final, [r["mem_read_gbps"] for r in reads]


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """The counted sweep in 3 interleaved passes."""
    db = tmp_path_factory.mktemp("roofline") / "lab.sqlite"
    final, reads = _counted_sweep(db, passes=3)
    return db, final, [list(r) for r in reads]


def test_a_sweep_reads_bandwidth_at_its_start_and_before_each_pass_and_records_the_median(tiny_sweep):
    db, final, calls = tiny_sweep
    assert calls == [["cpu"]] * 4  # the start and each of 3 interleaved passes, not once per cell
    with Store(db) as store:
        env = store.sweep(final.sweep_id)["environment"]
    reads = env["mem_read_gbps_reads"]["cpu"]
    gbps = env["mem_read_gbps"]["cpu"]
    assert len(reads) == 4 and gbps == statistics.median(reads) > 0 and "sum over" in env["mem_read_method"]["cpu"]
    ok = [r.row() for r in final.results if r.status == "ok"]
    assert len(ok) == 2 and all(r["mem_read_gbps"] == gbps for r in ok)
    line = bandwidth_lines(env)[0]
    assert "the median of 4 such reads, at the start and before each pass" in line


@pytest.mark.slow  # opt-in (-m slow), to keep the default run short: bandwidth reads: the interleaved sweep's test above
def test_a_one_pass_sweep_reads_bandwidth_before_each_cell_and_each_row_takes_its_own_read(tmp_path):
    db = tmp_path / "lab.sqlite"
    final, reads = _counted_sweep(db, passes=1)
    assert len(reads) == 2  # the start (serving the first cell) and before the second runnable cell; none for int4
    rows = {r.config.precision: r.row() for r in final.results}
    assert rows["fp32"]["mem_read_gbps"] == reads[0]["cpu"] and rows["bf16"]["mem_read_gbps"] == reads[1]["cpu"]
    assert rows["int4"]["mem_read_gbps"] is None
    with Store(db) as store:
        env = store.sweep(final.sweep_id)["environment"]
    assert env["mem_read_gbps_reads"]["cpu"] == [reads[0]["cpu"], reads[1]["cpu"]]
    assert "at the start and before each cell" in bandwidth_lines(env)[0]


def test_another_read_keeps_every_read_and_takes_their_median_for_measured_devices_only():
    env = {"mem_read_gbps": {"cpu": 50.0}, "mem_read_method": {"cpu": "torch float32 sum"}}
    env = roofline.with_another_read(env, {"mem_read_gbps": {"cpu": 80.0, "cuda:0": 900.0}})
    env = roofline.with_another_read(env, {"mem_read_gbps": {"cpu": 52.0}})
    assert env["mem_read_gbps_reads"] == {"cpu": [50.0, 80.0, 52.0]} and env["mem_read_gbps"] == {"cpu": 52.0}


def test_weight_bytes_per_step_match_the_checkpoint_shapes_in_fp32_and_bf16(tiny_sweep):
    db, final, _ = tiny_sweep
    rows = {r["precision"]: r for r in cells_frame(db, [final.sweep_id]).to_dict("records")}
    assert rows["fp32"]["weight_mb_per_step"] * 1e6 == pytest.approx(expected_stock_bytes(4), rel=1e-12)
    assert rows["bf16"]["weight_mb_per_step"] * 1e6 == pytest.approx(expected_stock_bytes(2), rel=1e-12)


def test_floor_and_roofline_are_derived_exactly_from_the_stored_numbers(tiny_sweep):
    db, final, _ = tiny_sweep
    for r in cells_frame(db, [final.sweep_id]).to_dict("records"):
        if r["status"] != "ok":
            continue
        assert r["floor_step_ms"] == r["weight_mb_per_step"] / r["mem_read_gbps"]
        assert r["roofline"] == r["floor_step_ms"] / r["step_ms"]


def test_failed_cells_keep_the_roofline_columns_empty(tiny_sweep):
    db, final, _ = tiny_sweep
    (failed,) = [r for r in cells_frame(db, [final.sweep_id]).to_dict("records") if r["status"] != "ok"]
    assert failed["precision"] == "int4" and all(failed[c] is None or math.isnan(failed[c]) for c in ROOF_COLUMNS)


def test_lab_int8_counts_one_int8_copy_and_per_channel_scales():
    """The lab's int8 weights (code heads included) are counted once, as int8 values plus a float32 scale per
    row; the lab's own format adds an int32 sum per row and pads the rows of each matrix to a multiple of 16."""
    from chattts_lab.models import LoadConfig, load_model, unload_all

    shapes = _checkpoint_shapes()
    norms = [s for k, s in shapes.items() if k.startswith("gpt.") and "norm" in k]
    heads = [s for k, s in shapes.items() if k.startswith("embed.head_code.") and k.endswith("original1")]
    layers = {k.split(".")[2] for k in shapes if k.startswith("gpt.layers.")}

    def rows(i, *names):
        return sum(shapes[f"gpt.layers.{i}.{n}.weight"][0] for n in names)

    # as the lab holds them: q,k,v fused into one matrix and gate,up into another; the 4 code heads into one
    matrices = [(rows(i, *names), shapes[f"gpt.layers.{i}.{names[0]}.weight"][1]) for i in layers
                for names in (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
                              ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",))]
    matrices.append((sum(s[0] for s in heads), heads[0][1]))
    try:
        model = load_model(LoadConfig(model="synthetic-tiny", engine="lab", precision="int8", threads=1))
        packed = model.effective["kernels"].startswith("lab-int8")
        padded = [(-(-n // 16) * 16 if packed else n, k) for n, k in matrices]
        expected = sum(n * k + (8 if packed else 4) * n for n, k in padded) + 4 * sum(_numel(s) for s in norms)
        assert roofline.decode_weight_bytes(model) == expected
    finally:
        unload_all()


def _row_result(precision="int8", step_ms=20.0, status="ok", batch=1, weight_bytes=200e6, gbps=20.0):
    cfg = RunConfig("synthetic-tiny", "cpu", precision, batch, 2, 16, engine="lab")
    if status != "ok":
        return CellResult(cfg, status, "ruled out")
    timed = [{"phase": "timed", "wall_s": 1.0, "decode_s": step_ms / 1000 * 15, "gpt_steps": 16,
              "audio_s": metrics.audio_seconds(16), "peak_rss_mb": 900.0, "tokens": [16] * batch}]
    result = summarize(cfg, "ok", "", {"samples": timed, "effective": {
        "device": "cpu", "threads": 2, "weight_bytes_per_step": weight_bytes}})
    return roofline.with_bandwidth(result, {"mem_read_gbps": {"cpu": gbps}})


def test_the_figure_builds_from_a_results_frame_and_is_in_the_html_report():
    df = results_frame([_row_result("int8", 20.0), _row_result("fp32", 100.0, weight_bytes=800e6),
                        _row_result("bf16", status="unsupported")])
    fig = roofline_by_config(df)
    plotted = sorted(x for trace in fig.data for x in trace.x)
    assert plotted == pytest.approx([0.4, 0.5])  # 10 ms floor / 20 ms step; 40 ms floor / 100 ms step
    assert "1 unsupported" in fig.layout.title.text
    assert roofline_by_config in REPORT_FIGURES
    page = html_report(df, {"mem_read_gbps": {"cpu": 20.0}, "mem_read_method": {"cpu": "torch.sum"}}, [])
    assert "Distance from the memory-bandwidth floor" in page and "Memory read bandwidth (cpu): 20 GB/s" in page
    assert "roofline" in markdown_table(df).splitlines()[0]


def test_the_recommendation_says_how_far_from_the_floor_it_is():
    text = recommend(results_frame([_row_result("int8", 20.0)])).reason
    assert "floor of 10.0 ms" in text and "roofline 0.50" in text and "2.0× the floor" in text


def test_an_old_database_is_upgraded_with_empty_roofline_columns(tmp_path):
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript((DATA / "lab-schema-v1.sql").read_text())
    with Store(db) as store:
        (sweep_row,) = store.sweeps_list()
        store.add_cell(sweep_row["id"], 1, _row_result())
    conn = sqlite3.connect(db)
    assert set(ROOF_COLUMNS) <= {r[1] for r in conn.execute("PRAGMA table_info(cells)")}
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    stored = conn.execute("SELECT roofline FROM cells ORDER BY idx").fetchall()
    assert stored[0][0] is None and stored[1][0] == pytest.approx(0.5)


def test_a_bundle_carries_the_roofline_to_another_machine(tmp_path):
    with Store(tmp_path / "a.sqlite") as store:
        sid = store.create_sweep(SweepSpec(model="synthetic-tiny").to_dict(),
                                 {"mem_read_gbps": {"cpu": 20.0}, "mem_read_method": {"cpu": "torch.sum"}})
        store.add_cell(sid, 0, _row_result())
    export_bundle(tmp_path / "a.sqlite", tmp_path / "a.json")
    (new,), _ = import_bundle(tmp_path / "b.sqlite", tmp_path / "a.json")
    (row,) = cells_frame(tmp_path / "b.sqlite", [new]).to_dict("records")
    assert (row["weight_mb_per_step"], row["floor_step_ms"]) == (200.0, 10.0) and row["roofline"] == pytest.approx(0.5)


def test_the_figure_says_so_when_no_cell_has_a_roofline():
    result = CellResult.from_dict({**_row_result().to_dict(), "mem_read_gbps": None})  # an older sweep's row
    fig = roofline_by_config(results_frame([result]))
    assert "did not measure the memory bandwidth" in fig.layout.annotations[0].text
