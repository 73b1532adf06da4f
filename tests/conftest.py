"""Shared fixtures: the real ChatTTS code on small synthetic weights (built once into the cache)."""

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for the network

TINY = "synthetic-tiny"


@pytest.fixture(scope="session")
def tiny_model():
    from chattts_lab import LoadConfig, load_model

    return load_model(LoadConfig(model=TINY, device="cpu", precision="fp32", threads=1))
