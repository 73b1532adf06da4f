"""Full-size (or tiny) ChatTTS checkpoints with random weights, built offline.

The released weights cannot always be fetched (no network, no licence for the use at hand), yet the
real ChatTTS code should still run end to end so that timings are real. This module builds a
checkpoint from ChatTTS's own classes and `Config()`, in the released `asset/` layout, into a cache
folder. Its audio is noise: everything that plays or saves it must say so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# Variants are data, not subclasses. "full" matches the released architecture exactly (timings mean
# something); "tiny" keeps every shape the ChatTTS code checks (hidden 768, vocabularies, 4 codebooks)
# but few layers, so tests run the real code path in milliseconds per step.
SIZES: dict[str, dict[str, int]] = {
    "full": dict(gpt_layers=20, decoder_layers=12, dvae_layers=12, vocos_layers=8),
    "tiny": dict(gpt_layers=2, decoder_layers=1, dvae_layers=1, vocos_layers=1),
}
FORMAT_VERSION = 1
MARKER = "chattts_lab_synthetic.json"  # written last: a folder without it is an unfinished build

# Tokens ChatTTS and its prompts look up by name; the rest of the vocabulary is filler.
SPECIAL_TOKENS = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + ["[Stts]", "[Ptts]", "[spk_emb]", "[empty_spk]", "[Sbreak]", "[Pbreak]", "[Ebreak]"]
    + ["[uv_break]", "[v_break]", "[lbreak]", "[laugh]"]
    + [f"[break_{i}]" for i in range(8)]
    + [f"[oral_{i}]" for i in range(10)]
    + [f"[laugh_{i}]" for i in range(3)]
    + [f"[speed_{i}]" for i in range(10)]
)
NUM_TEXT_TOKENS = 21178  # ChatTTS's Embed and head sizes assume exactly this vocabulary


@dataclass(frozen=True)
class SyntheticSpec:
    size: str = "full"
    seed: int = 0

    def __post_init__(self):
        if self.size not in SIZES:
            raise ValueError(f"unknown synthetic size {self.size!r}; choose one of {sorted(SIZES)}")


def default_cache_dir() -> Path:
    """Where what the lab generates lives (checkpoints, onnx graphs, the kernels' sources): $CHATTTS_LAB_CACHE,
    else ~/.cache/chattts_lab."""
    root = os.environ.get("CHATTTS_LAB_CACHE") or os.path.join(Path.home(), ".cache", "chattts_lab")
    return Path(root)


def checkpoint_dir(spec: SyntheticSpec, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / f"synthetic-{spec.size}-seed{spec.seed}-v{FORMAT_VERSION}"


def is_synthetic(folder: Path) -> bool:
    return (Path(folder) / MARKER).is_file()


def read_marker(folder: Path) -> dict:
    return json.loads((Path(folder) / MARKER).read_text())


def ensure_checkpoint(spec: SyntheticSpec = SyntheticSpec(), cache_dir: Path | None = None) -> Path:
    """Return the folder of a built checkpoint, building it on first use (about 10 s for 'full')."""
    folder = checkpoint_dir(spec, cache_dir)
    if is_synthetic(folder):
        return folder
    tmp = folder.with_name(folder.name + f".building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log.warning("building a %s ChatTTS checkpoint with RANDOM weights in %s", spec.size, folder)
    _build(spec, tmp)
    # Renamed into place, so a crash never leaves a half-written checkpoint that looks finished.
    try:
        tmp.rename(folder)  # atomic; refused while a non-empty folder is there
    except OSError:
        if is_synthetic(folder):  # another process (a second app, a parallel test) built it meanwhile: keep it
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # an unfinished folder from an older version: replace it
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)
    return folder


def _build(spec: SyntheticSpec, folder: Path) -> None:
    from ChatTTS.config import Config
    from safetensors.torch import save_file

    dims = SIZES[spec.size]
    cfg = apply_size(Config(), spec.size)
    asset = folder / "asset"
    asset.mkdir(parents=True)
    torch.manual_seed(spec.seed)
    with torch.no_grad():
        save_file(_contiguous(_vocos(cfg).state_dict()), str(asset / "Vocos.safetensors"))
        save_file(_contiguous(_dvae(cfg).state_dict()), str(asset / "DVAE.safetensors"))
        save_file(_contiguous(_decoder(cfg).state_dict()), str(asset / "Decoder.safetensors"))
        save_file(_contiguous(_embed(cfg).state_dict()), str(asset / "Embed.safetensors"))
        _gpt(cfg).save_pretrained(str(asset / "gpt"), safe_serialization=True)
        _tokenizer().save_pretrained(str(asset / "tokenizer"))
    (folder / MARKER).write_text(json.dumps({"format": FORMAT_VERSION, "seed": spec.seed, **asdict(spec), **dims}))


def apply_size(cfg, size: str):
    """Point a ChatTTS `Config` at a variant's layer counts.

    `Config`'s nested defaults are shared class-level instances, so each one is replaced, never mutated.
    """
    from ChatTTS.config import config as C

    dims = SIZES[size]
    d = cfg.decoder
    cfg.decoder = C.Decoder(idim=d.idim, odim=d.odim, hidden=d.hidden, n_layer=dims["decoder_layers"], bn_dim=d.bn_dim)
    enc, dec = cfg.dvae.encoder, cfg.dvae.decoder
    cfg.dvae = C.DVAE(
        encoder=C.Decoder(idim=enc.idim, odim=enc.odim, hidden=enc.hidden, n_layer=dims["dvae_layers"], bn_dim=enc.bn_dim),
        decoder=C.Decoder(idim=dec.idim, odim=dec.odim, hidden=dec.hidden, n_layer=dims["dvae_layers"], bn_dim=dec.bn_dim),
        vq=C.VQ(),
    )
    b = cfg.vocos.backbone.init_args
    cfg.vocos = C.Vocos(
        feature_extractor=cfg.vocos.feature_extractor,
        backbone=C.Backbone(init_args=C.BackboneInitArgs(
            input_channels=b.input_channels, dim=b.dim, intermediate_dim=b.intermediate_dim, num_layers=dims["vocos_layers"])),
        head=cfg.vocos.head,
    )
    g = asdict(cfg.gpt)
    g["num_hidden_layers"] = dims["gpt_layers"]
    cfg.gpt = C.GPT(**g)
    return cfg


def _contiguous(state: dict) -> dict:
    return {k: v.contiguous() for k, v in state.items()}


def _vocos(cfg):
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    v = cfg.vocos
    return Vocos(
        feature_extractor=instantiate_class(args=(), init=asdict(v.feature_extractor)),
        backbone=instantiate_class(args=(), init=asdict(v.backbone)),
        head=instantiate_class(args=(), init=asdict(v.head)),
    )


def _dvae(cfg):
    from ChatTTS.model import DVAE

    return DVAE(
        decoder_config=asdict(cfg.dvae.decoder),
        encoder_config=asdict(cfg.dvae.encoder),
        vq_config=asdict(cfg.dvae.vq),
        dim=cfg.dvae.decoder.idim,
    )


def _decoder(cfg):
    from ChatTTS.model import DVAE

    return DVAE(decoder_config=asdict(cfg.decoder), dim=cfg.decoder.idim)


def _embed(cfg):
    from ChatTTS.model import Embed

    e = cfg.embed
    embed = Embed(e.hidden_size, e.num_audio_tokens, e.num_text_tokens, e.num_vq)
    # Small output weights keep random logits spread out, so sampling does not stop at step one.
    for head in [embed.head_text, *embed.head_code]:
        head.parametrizations.weight.original0.data.fill_(0.05)
    return embed


def _gpt(cfg):
    from transformers import LlamaConfig, LlamaModel

    llama_cfg = LlamaConfig(**asdict(cfg.gpt), rms_norm_eps=1e-6, num_key_value_heads=cfg.gpt.num_attention_heads, vocab_size=32000)
    return LlamaModel(llama_cfg)


def _tokenizer():
    from transformers import BertTokenizerFast

    filler = NUM_TEXT_TOKENS - len(SPECIAL_TOKENS)
    # Single characters first (so any text tokenizes to something), then filler pieces.
    chars = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0x4E00, 0x4E00 + 6000)]
    words = chars + [f"##{c}" for c in chars]
    words += [f"w{i}" for i in range(filler - len(words))]
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + words)}
    assert len(vocab) == NUM_TEXT_TOKENS
    tok = BertTokenizerFast(vocab=vocab, do_lower_case=True, tokenize_chinese_chars=True)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[5:]})
    return tok
