"""The onnx engine against stock ChatTTS, on the real ChatTTS code with tiny synthetic weights.

The first run in a fresh model cache exports and quantizes the tiny GPT (about 10 s on 2 cores); later runs
reuse the cached graphs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from chattts_lab import torch_thread
from chattts_lab.trackers.fidelity import compare, trace
from chattts_lab.metrics import samples_for_tokens
from chattts_lab.models import LoadConfig, load_model, unload_all
from chattts_lab.engines.onnx.build import ensure_graph
from chattts_lab.engines import UnsupportedPrecision, unsupported_reason
from chattts_lab.requests import SynthesisRequest
from chattts_lab.history.store import Store
from chattts_lab.synthesis import synthesize, synthesize_stream

from tests.conftest import CPU_PRECISION_TABLE, ROOT, TINY, x86_64_only
from tests.support.cli import bench_here

TOKENS = 16
TEXTS = ["Hello there, this is a test.", "A second text, longer than the first one by a little."]


def load(engine: str, precision: str = "fp32", threads: int = 1):
    return load_model(LoadConfig(model=TINY, precision=precision, engine=engine, threads=threads))


def code_tokens(model, texts, seed):
    """Sampled audio tokens of a padded batch straight from ChatTTS's `_infer_code` (which calls gpt.generate)."""
    import ChatTTS

    chat = model.chat
    params = ChatTTS.Chat.InferCodeParams(max_new_token=24, manual_seed=seed, show_tqdm=False)
    texts = [chat.normalizer(t, True, True, None) for t in texts]
    return [t.clone() for t in next(chat._infer_code(texts, False, chat.device, True, params)).ids]


@pytest.fixture(scope="module")
def stock_runs():
    """Stock fp32: one greedy trace (tokens and hidden states) and one sampled, padded batch."""
    unload_all()
    model = load("stock")
    runs = {"greedy": trace(model, TOKENS), "batch": code_tokens(model, TEXTS, seed=11)}
    unload_all()
    return runs


def test_onnx_fp32_matches_stock_greedy_tokens_and_hidden_states(stock_runs):
    model = load("onnx")
    got = compare(stock_runs["greedy"], trace(model, TOKENS))
    assert got["token_match"] == 1.0 and got["first_divergence"] is None
    assert got["hidden_rel_err"] < 1e-5, got


def test_onnx_fp32_padded_batch_samples_the_same_tokens_as_stock(stock_runs):
    ids = code_tokens(load("onnx"), TEXTS, seed=11)  # different prompt lengths: the padding mask path
    assert [len(t) for t in ids] == [len(t) for t in stock_runs["batch"]]
    for a, b in zip(ids, stock_runs["batch"]):
        assert torch.equal(a, b)


def test_onnx_int8_drift_from_stock_is_measured_and_small(stock_runs):
    got = compare(stock_runs["greedy"], trace(load("onnx", "int8"), TOKENS))
    # quantization moves the numbers (so the error is above fp32's) but not far on the first step
    assert 1e-5 < got["hidden_rel_err_first_step"] < 0.05, got
    assert 0.0 <= got["token_match"] <= 1.0


def test_onnx_fp16_computes_in_fp16_and_stays_close_to_stock(stock_runs):
    model = load("onnx", "fp16")
    assert model.effective["dtype_gpt"] == "float16" and model.engine.gpt_module.path.name == "gpt-fp16.onnx"
    got = compare(stock_runs["greedy"], trace(model, TOKENS))
    # fp16 rounding moves the hidden states (so the error is above fp32's 1e-7) but keeps them close
    assert 1e-5 < got["hidden_rel_err"] < 1e-2, got


def test_second_load_reuses_the_cached_graph_file():
    unload_all()
    first = load("onnx", "int8")
    path = first.engine.gpt_module.path
    before = path.stat()
    unload_all()
    again = load("onnx", "int8")
    assert again.engine.gpt_module.path == path
    assert again.effective["onnx_built"] == {}
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_changed_weights_are_rebuilt_and_the_old_graphs_removed(tmp_path):
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=8, max_position_embeddings=64)
    checkpoint, cache = tmp_path / "gpt", tmp_path / "cache"
    LlamaModel(config).save_pretrained(checkpoint)
    first, built = ensure_graph(LlamaModel.from_pretrained(checkpoint), "int8", cache)
    assert set(built) == {"export_s", "quantize_s"} and first.is_file()
    assert ensure_graph(LlamaModel.from_pretrained(checkpoint), "int8", cache) == (first, {})  # same weights: reused

    changed = LlamaModel.from_pretrained(checkpoint)
    with torch.no_grad():
        changed.layers[0].mlp.down_proj.weight[0, 0] += 1e-3
    changed.save_pretrained(checkpoint)
    second, built = ensure_graph(LlamaModel.from_pretrained(checkpoint), "int8", cache)
    assert second.parent != first.parent and "export_s" in built
    assert not first.parent.exists()  # the graphs of the earlier weights are gone


def test_onnx_engine_synthesizes_a_batch_with_this_calls_threads():
    model = load("onnx", "int4", threads=2)
    out = synthesize(model, SynthesisRequest.of(TEXTS, max_new_token=8, min_new_token=8), threads=1)
    assert out.measurements.tokens == [8, 8] and all(np.isfinite(a).all() for a in out.audio)
    assert out.measurements.effective["onnx_threads"] == 1  # the session follows this call's thread count
    options = model.engine.gpt_module.session.get_session_options()
    assert options.intra_op_num_threads == 1
    # its threads spin between a step's matmuls, and stop when the step returns (the decoder runs between steps)
    assert [options.get_session_config_entry(f"session.{key}") for key in ("intra_op.allow_spinning",
                                                                          "force_spinning_stop")] == ["1", "1"]


def test_int8_keeps_int8_text_tables_and_torch_runs_one_thread_only_while_the_gpt_generates():
    from chattts_lab.engines.lab.linear import Int8Embedding
    from chattts_lab.engines.lab.on_demand import OnDemand

    model = load("onnx", "int8", threads=2)
    assert isinstance(model.chat.embed.emb_text, Int8Embedding)  # the fp32 tables are gone, as in the lab engine
    assert isinstance(model.chat.dvae, OnDemand) and not len(model.chat.embed.head_code)  # trimmed as the lab's
    heads, seen = model.engine.heads, []
    code_logits = heads.code_logits
    heads.code_logits = lambda hidden: (seen.append(torch.get_num_threads()), code_logits(hidden))[1]  # a spy
    try:
        synthesize(model, SynthesisRequest.of(TEXTS[0], max_new_token=4, min_new_token=4), threads=2)
    finally:
        del heads.code_logits
    assert seen and set(seen) == {1}
    assert torch_thread.run(torch.get_num_threads) == 2  # the decoder and vocoder ran with the call's threads again


def test_rows_step_with_torch_on_one_thread_and_their_audio_decodes_with_the_calls_threads():
    """The continuous-batching rows (the lab's, on the session) hold torch to one thread while the GPT generates, as
    a whole call does; their chunks' decoder and vocoder run with the threads the loop set."""
    from chattts_lab.models import set_threads
    from chattts_lab.requests import Sampling, Voice
    from chattts_lab.synthesis import chattts_params

    model = load("onnx", "int4", threads=2)
    heads, chat, seen = model.engine.heads, model.chat, {"gpt": [], "audio": []}
    code_logits = heads.code_logits
    heads.code_logits = lambda hidden: (seen["gpt"].append(torch.get_num_threads()), code_logits(hidden))[1]
    vocoding = chat.vocos.head.out.register_forward_hook(lambda *_: seen["audio"].append(torch.get_num_threads()))

    def rows() -> int:
        set_threads(2)
        decoder = model.engine.row_decoder(chat, 2)
        for i, text in enumerate(TEXTS):
            request = SynthesisRequest.of(text, sampling=Sampling(audio_seed=i), voice=Voice(seed=i), max_new_token=8,
                                          min_new_token=8)
            params_code, params_refine = chattts_params(model, request)
            decoder.admit(decoder.prompt(text, params_refine, params_code, False, True))
        while any(not r.ended for r in decoder.active):
            decoder.step()
        decoder.decode_spans([(row, 0, samples_for_tokens(row.generated)) for row in decoder.active])
        return torch.get_num_threads()

    try:
        assert torch_thread.run(rows) == 2
    finally:
        del heads.code_logits
        vocoding.remove()
    assert len(seen["gpt"]) == 2 + 7 and set(seen["gpt"]) == {1}  # two prefills, then 7 steps of both rows
    assert seen["audio"] and set(seen["audio"]) == {2}


def test_onnx_engine_streams_with_the_lab_loop_first_chunk_early():
    n = 30
    model = load("onnx", "int4")
    items = list(synthesize_stream(model, SynthesisRequest.of(TEXTS[0], max_new_token=n, min_new_token=n)))
    chunks, final = items[:-1], items[-1]
    assert len(chunks) >= 2 and len(chunks[0].audio[0]) < samples_for_tokens(n) // 2
    assert sum(len(c.audio[0]) for c in chunks) == samples_for_tokens(n) == len(final.audio[0])


@x86_64_only
@pytest.mark.parametrize("precision, expected", CPU_PRECISION_TABLE["onnx"].items())
def test_each_onnx_precision_runs_on_cpu_as_the_table_says(precision, expected):
    config = LoadConfig(model=TINY, precision=precision, engine="onnx", threads=1)
    if expected.startswith("unsupported:"):
        with pytest.raises(UnsupportedPrecision, match=expected.removeprefix("unsupported:")):
            load_model(config)
        return
    assert load_model(config).effective["dtype_gpt"] == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no CUDA provider exists")
def test_a_missing_cuda_provider_is_a_reason_not_a_crash():
    assert "CUDAExecutionProvider" in unsupported_reason("onnx", torch.device("cuda"), "fp32")


def test_cli_sweep_runs_an_onnx_cell_and_keeps_the_unsupported_one(tmp_path, capsys):
    db, out = tmp_path / "lab.sqlite", tmp_path / "out"
    bench_here(capsys, "--model", TINY, "--engine", "onnx", "--precision", "fp32,bf16", "--tokens", "8", "--threads",
               "1", "--repeats", "1", "--min-time", "0", "--warmup", "0", "--fidelity", "off", "--db", str(db),
               "--out", str(out), "--format", "json")
    cells = {c["precision"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    assert cells["fp32"]["status"] == "ok", cells["fp32"]
    assert (cells["fp32"]["engine"], cells["fp32"]["dtype_gpt"], cells["fp32"]["threads_effective"]) == ("onnx", "float32", 1)
    assert cells["bf16"]["status"] == "unsupported" and "no bf16 graph" in cells["bf16"]["reason"]
    with Store(db) as store:
        (sweep,) = store.sweeps_list()
        (ok,) = [r for r in store.results(sweep["id"]) if r.status == "ok"]
    assert ok.effective["onnx_threads"] == 1 and ok.effective["onnx_provider"] == "CPUExecutionProvider"


def test_asking_whether_int4_runs_imports_no_quantizer():
    """Every app start asks which precisions each engine runs; importing onnxruntime's quantizers to answer cost
    about 1 s of it (they import onnx, scipy and the calibrators). They load when a graph is quantized."""
    check = ("import sys; from chattts_lab.engines.onnx.build import int4_available; "
             "print(int4_available(), 'onnxruntime.quantization' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.stdout.split() == ["True", "False"], run.stderr[-2000:]
