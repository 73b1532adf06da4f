"""Exported and quantized GPT graphs, cached in the model cache under a hash of the weights.

`ensure_graph(llama, precision)` returns the .onnx file for a precision, building what is missing:
fp32 (and fp16) written from the loaded `LlamaModel`'s weights (graph.py), int8 by ONNX Runtime's dynamic quantization
(per-channel int8 weights, activations quantized per call), int4 by its `MatMulNBits` quantizer (4-bit blocks
of 128 with int8 compute). The folder's name is a hash of the GPT's weights and config, of this export's format
and of the ONNX Runtime version, so changed weights get a fresh folder and are rebuilt. Files are written
under a temporary name and renamed, so a half-written graph is never used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from pathlib import Path

import torch

from chattts_lab.synthetic import default_cache_dir

log = logging.getLogger(__name__)

EXPORT_FORMAT = 4  # bump when what is built changes (graph.py, the quantizers' settings)
# one scale per 128 weights, the group size GPTQ and AWQ use: full-size, 2 threads, a decode step took 6.3 ms
# against 8.1 with blocks of 32 (the scales are a fifth of a 32-block graph's bytes; 101 MB instead of 119)
INT4_BLOCK = 128
SOURCE_FILE = "source.json"
# q.k and attention.v multiply two activations: leave them in float, quantize only the weights' matmuls
# (DefaultTensorType: shape inference cannot type the outputs of ONNX Runtime's own fused ops)
INT8_OPTIONS = {"MatMulConstBOnly": True, "DefaultTensorType": 1}  # 1 = onnx.TensorProto.FLOAT


def graph_folder(llama, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "onnx" / weights_key(llama)


def weights_key(llama) -> str:
    """A hash of the GPT's weights (its safetensors file, read in chunks, or its tensors) and what shapes them."""
    import onnxruntime

    h = hashlib.sha256(f"format {EXPORT_FORMAT} ort {onnxruntime.__version__}".encode())
    h.update(llama.config.to_json_string().encode())
    source = _source_folder(llama)
    files = sorted(Path(source).glob("*.safetensors")) if source else []
    if files:
        for f in files:
            with open(f, "rb") as fh:  # read(), not mmap: hashing must not leave the weights resident
                h.update(hashlib.file_digest(fh, "sha256").digest())
    else:
        for name, tensor in llama.state_dict().items():
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:20]


def ensure_graph(llama, precision: str, cache_dir: Path | None = None) -> tuple[Path, dict]:
    """The cached graph for `precision`, built if missing; and what building it took ({} when cached)."""
    folder = graph_folder(llama, cache_dir)
    target = folder / f"gpt-{precision}.onnx"
    built: dict = {}
    if target.exists():
        return target, built
    folder.mkdir(parents=True, exist_ok=True)
    source = _source_folder(llama)
    if source is not None:
        _forget_older_builds(folder, source)
    if precision == "fp16":  # written directly in fp16; the quantizers start from the fp32 graph
        built["export_s"] = _timed(lambda tmp: export(llama, tmp, "fp16"), target)
    else:
        fp32 = folder / "gpt-fp32.onnx"
        if not fp32.exists():
            built["export_s"] = _timed(lambda tmp: export(llama, tmp, "fp32"), fp32)
        if precision == "int8":
            built["quantize_s"] = _timed(lambda tmp: quantize_int8(fp32, tmp), target)
        elif precision == "int4":
            built["quantize_s"] = _timed(lambda tmp: quantize_int4(fp32, tmp), target)
    log.info("onnx engine: built %s in %s", target, built)
    return target, built


def _timed(write, target: Path) -> float:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    t0 = time.perf_counter()
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return round(time.perf_counter() - t0, 2)


def export(llama, path: Path, compute: str) -> None:
    """Write ChatTTS's GPT as one graph computing in `compute`, fp32 or fp16 (graph.build_graph). ONNX's checker
    does not know ONNX Runtime's SimplifiedLayerNormalization; the session that opens the file checks it."""
    import onnx

    from chattts_lab.engines.onnx.graph import build_graph

    onnx.save(build_graph(llama, compute), str(path))


def quantize_int8(source: Path, path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(path), per_channel=True, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], extra_options=INT8_OPTIONS)


def quantize_int4(source: Path, path: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    # accuracy_level 4: activations quantized to int8 inside MatMulNBits, the fast CPU path
    config = DefaultWeightOnlyQuantConfig(block_size=INT4_BLOCK, is_symmetric=True, accuracy_level=4)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=config)
    quantizer.process()
    onnx.save(quantizer.model.model, str(path))


def int4_available() -> bool:
    """Whether this onnxruntime ships the MatMulNBits quantizer, found without importing it: its package imports
    onnx, scipy and the calibrators (about 1 s), and every app start asks which precisions can run."""
    spec = importlib.util.find_spec("onnxruntime")
    folders = (spec.submodule_search_locations or []) if spec else []
    return any((Path(folder) / "quantization" / "matmul_nbits_quantizer.py").is_file() for folder in folders)


def _source_folder(llama) -> str | None:
    """The checkpoint folder the GPT was loaded from; None for weights made in memory."""
    folder = Path(getattr(llama.config, "_name_or_path", "") or "")
    return str(folder.resolve()) if str(folder) and folder.is_dir() else None


def _forget_older_builds(folder: Path, source: str) -> None:
    """Record which weights this folder is for, and delete the folders of earlier weights of the same checkpoint
    folder (changed weights or an older export format): each holds about 1 GB of graphs nobody will load again."""
    (folder / SOURCE_FILE).write_text(json.dumps({"source": source, "format": EXPORT_FORMAT}))
    for other in folder.parent.iterdir():
        marker = other / SOURCE_FILE
        if other != folder and marker.is_file() and json.loads(marker.read_text()).get("source") == source:
            log.info("onnx engine: removing %s, built from earlier weights of %s", other, source)
            shutil.rmtree(other, ignore_errors=True)
