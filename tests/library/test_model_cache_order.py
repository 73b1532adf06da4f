"""`tiny_model` survives tests that load other configurations, in any order.

`load_model` keeps one model (CHATTTS_LAB_MAX_MODELS=1): loading another configuration unloads the
previous one. The three tests below run as a sequence; each of them must pass whatever ran before it
(also run them in reverse: `pytest 'tests/library/test_model_cache_order.py::test_c...' '...::test_b...' ...`).
"""

import numpy as np

from chattts_lab import LoadConfig, SynthesisRequest, load_model, synthesize

from tests.conftest import TINY

REQUEST = SynthesisRequest.of("Still loaded?", max_new_token=3, min_new_token=3)


def _serves(model) -> bool:
    out = synthesize(model, REQUEST)
    return out.measurements.tokens == [3] and bool(np.isfinite(out.audio[0]).all())


def test_a_tiny_model_serves(tiny_model):
    assert tiny_model.chat.has_loaded() and _serves(tiny_model)


def test_b_loading_another_configuration_unloads_the_tiny_model(tiny_model):
    """The premise of this file: without it, the other two tests would prove nothing."""
    other = load_model(LoadConfig(model=TINY, precision="bf16", threads=1))
    assert other is not tiny_model and other.effective["dtype_gpt"] == "bfloat16"
    assert not tiny_model.chat.has_loaded()  # evicted: anyone still holding it holds an empty Chat
    assert _serves(other)


def test_c_tiny_model_serves_after_another_configuration_was_loaded(tiny_model):
    assert tiny_model.chat.has_loaded() and tiny_model.effective["dtype_gpt"] == "float32"
    assert _serves(tiny_model)
