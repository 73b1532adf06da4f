"""Model sources and loading: one `--model` value used everywhere, one loaded model reused.

A source is 'auto', 'hf', 'synthetic', 'synthetic-tiny' or a local folder with the released
`asset/` layout. 'auto' tries, in order: $CHATTTS_LAB_MODEL_DIR, the Hugging Face cache, a download
that gives up quickly without network, and finally full-size synthetic weights with a warning.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from chattts_lab import heap, synthetic
from chattts_lab.devices import parse_device
from chattts_lab.limits import out_of_memory_boundary
from chattts_lab.torch_thread import on_torch_thread
from chattts_lab import engines
from chattts_lab.engines import DEFAULT_ENGINE, DEFAULT_PRECISION, EngineRuntime, module_dtype

log = logging.getLogger(__name__)

HF_REPO = "2Noise/ChatTTS"
ASSET_FILES = ("Vocos.safetensors", "DVAE.safetensors", "Decoder.safetensors", "Embed.safetensors", "gpt", "tokenizer")
NETWORK_PROBE_S = 3.0


class ModelUnavailable(RuntimeError):
    """A model source that cannot be used here; the message says why."""


@dataclass(frozen=True)
class ModelSource:
    """Where weights came from, resolved once: what a person must be told about the audio."""

    kind: str  # "hf", "local", "synthetic"
    path: Path
    synthetic: bool
    note: str = ""  # why this source was chosen, e.g. the fallback reason

    @property
    def label(self) -> str:
        if self.synthetic:
            return f"synthetic ({synthetic.read_marker(self.path).get('size', '?')}, random weights)"
        return f"{self.kind}: {self.path}"


@dataclass(frozen=True)
class LoadConfig:
    model: str = "auto"
    device: str = "cpu"
    precision: str = DEFAULT_PRECISION
    threads: int | None = None  # None keeps torch's default
    engine: str = DEFAULT_ENGINE
    compile: bool = False


@dataclass
class LoadedModel:
    chat: object  # ChatTTS.Chat
    config: LoadConfig
    source: ModelSource
    device: torch.device
    load_s: float
    engine: EngineRuntime  # the engine installed on `chat` (chattts_lab/engines): ask it, never sniff `chat`
    effective: dict = field(default_factory=dict)  # what took effect: dtypes, compile, threads
    lock: threading.Lock = field(default_factory=threading.Lock)  # one synthesis at a time

    @property
    def synthetic(self) -> bool:
        return self.source.synthetic


# ----------------------------------------------------------------------------------------------
# Sources


def resolve_source(model: str) -> ModelSource:
    name = (model or "auto").strip()
    if name in ("synthetic", "synthetic-full", "synthetic-tiny"):
        size = "tiny" if name.endswith("tiny") else "full"
        return ModelSource("synthetic", synthetic.ensure_checkpoint(synthetic.SyntheticSpec(size)), True)
    if name == "hf":
        return _hf_source(allow_download=True)
    if name == "auto":
        return _auto_source()
    return _local_source(Path(name).expanduser())


def _local_source(path: Path) -> ModelSource:
    if not path.is_dir():
        raise ModelUnavailable(f"model folder {path} does not exist")
    missing = [f for f in ASSET_FILES if not (path / "asset" / f).exists()]
    if missing:
        raise ModelUnavailable(f"{path} lacks the released asset/ layout (missing: {', '.join(missing)})")
    pickles = [p.name for p in (path / "asset").rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt")]
    if pickles:
        raise ModelUnavailable(f"{path} holds pickled weights ({', '.join(pickles)}); only safetensors are loaded")
    return ModelSource("local", path, synthetic.is_synthetic(path))


def _hf_cache_snapshot() -> Path | None:
    """The released weights' snapshot in the Hugging Face cache (its `main`, found by huggingface_hub itself), if
    its GPT is there."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(HF_REPO, "asset/gpt/config.json")  # None, or a marker that it is known absent
    return Path(found).parents[2] if isinstance(found, str) else None


def _network_reachable(host: str = "huggingface.co", port: int = 443) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    result = []

    def probe():
        try:
            socket.create_connection((host, port), timeout=NETWORK_PROBE_S).close()
            result.append(True)
        except OSError:
            pass

    # DNS lookups ignore socket timeouts, so the probe runs in a thread we stop waiting for.
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(NETWORK_PROBE_S)
    return bool(result)


def _hf_source(allow_download: bool) -> ModelSource:
    cached = _hf_cache_snapshot()
    if cached:
        return ModelSource("hf", cached, False, "from the Hugging Face cache")
    if not allow_download or not _network_reachable():
        raise ModelUnavailable(f"{HF_REPO} is not in the Hugging Face cache and huggingface.co cannot be reached")
    from huggingface_hub import snapshot_download

    log.info("downloading %s (about 1.1 GB) into the Hugging Face cache", HF_REPO)
    try:
        path = snapshot_download(repo_id=HF_REPO, allow_patterns=["*.yaml", "*.json", "*.safetensors"])
    except Exception as exc:  # any hub/network failure becomes one clear message
        raise ModelUnavailable(f"download of {HF_REPO} failed: {exc}") from exc
    return ModelSource("hf", Path(path), False, "downloaded from the Hugging Face hub")


def _auto_source() -> ModelSource:
    configured = os.environ.get("CHATTTS_LAB_MODEL_DIR")
    if configured:
        return _local_source(Path(configured).expanduser())
    try:
        return _hf_source(allow_download=True)
    except ModelUnavailable as exc:
        reason = f"real weights unavailable ({exc}); using synthetic weights: timings are real, audio is noise"
        log.warning(reason)
        path = synthetic.ensure_checkpoint(synthetic.SyntheticSpec("full"))
        return ModelSource("synthetic", path, True, reason)


# ----------------------------------------------------------------------------------------------
# Loading

_cache: dict[LoadConfig, LoadedModel] = {}
_cache_lock = threading.Lock()
MAX_CACHED = int(os.environ.get("CHATTTS_LAB_MAX_MODELS", "1"))


def set_threads(threads: int | None) -> int:
    """Apply a thread count (None keeps the current one) and return what torch actually uses."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def validate(config: LoadConfig) -> torch.device:
    """Check a load configuration without loading anything; return its device."""
    device = parse_device(config.device)
    engines.check(config.engine, device, config.precision)
    if config.threads is not None and config.threads < 1:
        raise ValueError(f"threads must be at least 1, got {config.threads}")
    return device


def loaded(config: LoadConfig) -> LoadedModel | None:
    """The model for this configuration if it is already loaded, without loading it."""
    return _cache.get(replace(config, threads=None))


@on_torch_thread
def load_model(config: LoadConfig) -> LoadedModel:
    """Load (or reuse) ChatTTS for this configuration. Raises a clear error for what cannot run."""
    device = validate(config)
    key = replace(config, threads=None)  # threads are applied per call, not baked into the weights
    with _cache_lock:
        if key in _cache:
            set_threads(config.threads)
            return _cache[key]
        while len(_cache) >= MAX_CACHED:
            _evict(next(iter(_cache)))
        heap.leave_out_alive()  # the load's collections walk the new model only, not the imported runtime
        with out_of_memory_boundary(f"on {device} loading {config.model} ({config.engine}, {config.precision})",
                                    "free memory or choose a lower precision"):
            model = _load_uncached(config, device)
        _cache[key] = model
        return model


def _evict(config: LoadConfig) -> None:
    model = _cache.pop(config)
    model.chat.unload()
    del model
    heap.thaw()  # a frozen model (heap.settle, after a server's warm-up) would never be freed
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@on_torch_thread
def unload_all() -> None:
    with _cache_lock:
        for config in list(_cache):
            _evict(config)


def _load_uncached(config: LoadConfig, device: torch.device) -> LoadedModel:
    import ChatTTS

    _keep_normaliser_compiled()
    source = resolve_source(config.model)
    threads = set_threads(config.threads)
    t0 = time.perf_counter()
    chat = ChatTTS.Chat(logging.getLogger("ChatTTS"))
    if source.synthetic:
        synthetic.apply_size(chat.config, synthetic.read_marker(source.path)["size"])
    paths = {k: str(source.path / "asset" / Path(v).name) for k, v in _asset_paths(chat).items()}
    # Chat._load, not Chat.load: the latter insists on the released files' sha256 sums.
    engine = engines.get(config.engine)
    if not chat._load(device=device, compile=engine.compile_at_load(device, config.compile), **paths):
        raise ModelUnavailable(f"ChatTTS could not load the weights in {source.path}")
    runtime = engine.install(chat, device, config.precision, compile=config.compile, threads=threads)
    return LoadedModel(chat, config, source, device, time.perf_counter() - t0, runtime,
                       _effective(chat, runtime, config, threads))


@functools.cache  # once per process
def _keep_normaliser_compiled() -> None:
    """ChatTTS's text normaliser is numba code, compiled on first use in every process: about 3.6 s of CPU (English,
    Chinese and the invalid-character path each compile; 2-core Zen 4), paid by an app's first request and by every
    sweep cell's worker. Numba keeps the compiled code on disk when asked (beside ChatTTS's bytecode, or in the
    user's cache folder where that is read-only; NUMBA_CACHE_DIR chooses another), and a later process loads it in
    about 0.2 s. Where no folder is writable, each process compiles as before."""
    import ChatTTS.norm
    from numba.core.dispatcher import Dispatcher

    try:
        for compiled in vars(ChatTTS.norm).values():
            if isinstance(compiled, Dispatcher):
                compiled.enable_caching()
    except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
        log.info("the text normaliser is compiled anew in each process: %s", exc)


def _asset_paths(chat) -> dict:
    from dataclasses import asdict

    return asdict(chat.config.path)


def _effective(chat, runtime: EngineRuntime, config: LoadConfig, threads: int) -> dict:
    return {
        "device": str(chat.device),
        "device_gpt": str(chat.device_gpt),
        "engine": runtime.name,
        "precision": runtime.precision,
        "dtype_gpt": runtime.gpt_dtype,
        "dtype_decoder": module_dtype(chat.decoder),
        "dtype_vocos": module_dtype(chat.vocos),
        "threads": threads,
        "compile": runtime.compiled,
        "compile_requested": config.compile,
        "kernels": runtime.kernels,
        **runtime.effective(),
    }
