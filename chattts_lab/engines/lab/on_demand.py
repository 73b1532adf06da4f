"""ChatTTS's DVAE under the lab engine: read from its checkpoint on first use instead of held from load.

ChatTTS loads the DVAE (an encoder, a quantizer and a second decoder: 58 MB of fp32) for two things
only: encoding a voice clip into a sample-audio code (`Chat.sample_audio_speaker`) and decoding audio
codes without the mel decoder (`use_decoder=False`). Synthesis here always uses the mel decoder, so
most processes never touch it; under the lab engine it is built on first use and kept from then on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from pathlib import Path

import torch

log = logging.getLogger(__name__)


class OnDemand:
    """Stands in for a module: builds it on the first call or attribute access, then passes everything on."""

    def __init__(self, build, what: str):
        self._build, self._what, self._module = build, what, None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._module is not None

    def _get(self):
        with self._lock:
            if self._module is None:
                log.info("building %s on first use", self._what)
                self._module = self._build()
            return self._module

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy/pickle probes and our own fields never build the module
            raise AttributeError(name)
        return getattr(self._get(), name)


def dvae_checkpoint(gpt_folder: str) -> Path | None:
    """The DVAE's safetensors beside ChatTTS's `asset/gpt` folder (the released layout), if it is there."""
    path = Path(gpt_folder or "").parent / "DVAE.safetensors"
    return path if gpt_folder and path.is_file() else None


def load_dvae_on_demand(chat, gpt_folder: str) -> None:
    """Replace the loaded `chat.dvae` by an `OnDemand` that reloads it from its checkpoint; the DVAE stays loaded
    where the checkpoint cannot be found."""
    path = dvae_checkpoint(gpt_folder)
    if path is None or isinstance(chat.dvae, OnDemand):
        return
    device = chat.dvae.coef.device
    config = chat.config.dvae

    def build():
        from ChatTTS.model.dvae import DVAE

        dvae = DVAE(decoder_config=asdict(config.decoder), encoder_config=asdict(config.encoder),
                    vq_config=asdict(config.vq), dim=config.decoder.idim, device=device)
        with torch.no_grad():
            dvae.load_pretrained(str(path), device)
        return dvae.eval()

    chat.dvae = OnDemand(build, f"ChatTTS's DVAE from {path}")
