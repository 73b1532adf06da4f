"""ChatTTS Lab: run ChatTTS and measure how fast it runs on the machine in front of you.

The library never imports gradio. Typical use:

    from chattts_lab import LoadConfig, load_model, synthesize, SynthesisRequest
    model = load_model(LoadConfig(model="auto", device="cpu", precision="fp32", threads=2))
    out = synthesize(model, SynthesisRequest.of("Hello there."))
    out.audio[0], out.measurements.rtf
"""

from chattts_lab.devices import DeviceUnavailable, available_devices
from chattts_lab.limits import OutOfMemory
from chattts_lab.models import LoadConfig, LoadedModel, ModelUnavailable, load_model
from chattts_lab.engines import ENGINES, PRECISIONS, UnsupportedPrecision
from chattts_lab.requests import InvalidRequest, Refine, Sampling, SynthesisRequest, Voice
from chattts_lab.synthesis import (
    SYNTHETIC_WARNING,
    StreamChunk,
    SynthesisOutput,
    interrupt,
    synthesize,
    synthesize_stream,
    warm_up,
)

__all__ = [
    "DeviceUnavailable", "available_devices", "OutOfMemory", "LoadConfig", "LoadedModel", "ModelUnavailable", "load_model",
    "ENGINES", "PRECISIONS", "UnsupportedPrecision", "InvalidRequest", "Refine", "Sampling", "SynthesisRequest", "Voice",
    "SYNTHETIC_WARNING", "StreamChunk", "SynthesisOutput", "interrupt", "synthesize", "synthesize_stream", "warm_up",
]
