"""Model sources: synthetic builds, local folders and the offline fallback of 'auto'."""

import json

import pytest

from chattts_lab import synthetic
from chattts_lab.models import ModelUnavailable, resolve_source


def test_tiny_checkpoint_has_the_released_layout_and_a_marker():
    folder = synthetic.ensure_checkpoint(synthetic.SyntheticSpec("tiny"))
    for name in ("Vocos.safetensors", "DVAE.safetensors", "Decoder.safetensors", "Embed.safetensors", "gpt", "tokenizer"):
        assert (folder / "asset" / name).exists()
    assert synthetic.read_marker(folder)["size"] == "tiny"
    assert not list(folder.rglob("*.bin")), "weights are safetensors only"


def test_local_folder_source_checks_layout_and_refuses_pickles(tmp_path):
    with pytest.raises(ModelUnavailable, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))
    (tmp_path / "asset").mkdir()
    with pytest.raises(ModelUnavailable, match="missing"):
        resolve_source(str(tmp_path))
    tiny = synthetic.ensure_checkpoint(synthetic.SyntheticSpec("tiny"))
    for item in (tiny / "asset").iterdir():
        (tmp_path / "asset" / item.name).symlink_to(item)
    source = resolve_source(str(tmp_path))
    assert source.kind == "local" and not source.synthetic  # no marker in this folder
    (tmp_path / "asset" / "evil.pt").write_bytes(b"pickle")
    with pytest.raises(ModelUnavailable, match="pickled"):
        resolve_source(str(tmp_path))


def test_auto_falls_back_to_synthetic_offline_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("CHATTTS_LAB_MODEL_DIR", raising=False)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    source = resolve_source("auto")
    assert source.synthetic and "noise" in source.note and "cannot be reached" in source.note
    with pytest.raises(ModelUnavailable, match="cannot be reached"):
        resolve_source("hf")


def test_an_unfinished_build_is_not_mistaken_for_a_checkpoint(tmp_path):
    spec = synthetic.SyntheticSpec("tiny", seed=5)
    folder = synthetic.checkpoint_dir(spec, tmp_path)
    (folder / "asset").mkdir(parents=True)  # as a crash mid-build would leave it, without the marker
    assert not synthetic.is_synthetic(folder)
    with pytest.raises(ValueError, match="unknown synthetic size"):
        synthetic.SyntheticSpec("huge")
    assert json.loads(json.dumps(synthetic.SIZES))["tiny"]["gpt_layers"] == 2


def test_the_hf_cache_snapshot_is_found_by_huggingface_hub(monkeypatch, tmp_path):
    """The cache layout huggingface_hub writes (refs/main names the snapshot); a snapshot without the GPT is none."""
    import huggingface_hub.constants as c

    from chattts_lab.models import _hf_cache_snapshot

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--2Noise--ChatTTS"
    snapshot = repo / "snapshots" / ("a" * 40)
    (snapshot / "asset").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    assert _hf_cache_snapshot() is None
    (snapshot / "asset" / "gpt").mkdir()
    (snapshot / "asset" / "gpt" / "config.json").write_text("{}")
    assert _hf_cache_snapshot() == snapshot
