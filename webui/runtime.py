"""Runtime choices for a request: only what exists on this machine is offered."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chattts_lab import LoadConfig, available_devices
from chattts_lab.devices import parse_device
from chattts_lab.env import usable_cores
from chattts_lab.precision import ENGINES, PRECISIONS, unsupported_reason


@dataclass(frozen=True)
class RuntimeSettings:
    """Kept per user in gr.State; turned into a LoadConfig for each request."""

    device: str = "cpu"
    precision: str = "fp32"
    threads: int | None = None
    engine: str = "stock"

    def load_config(self, model: str) -> LoadConfig:
        return LoadConfig(model=model, device=self.device, precision=self.precision, threads=self.threads, engine=self.engine)

    def as_dict(self) -> dict:
        return asdict(self)


def max_threads() -> int:
    return usable_cores()


def default_settings() -> RuntimeSettings:
    return RuntimeSettings(threads=max_threads())


def engines_for(device: str) -> list[str]:
    dev = parse_device(device)
    return [e for e in ENGINES if any(unsupported_reason(e, dev, p) is None for p in PRECISIONS)]


def precisions_for(device: str, engine: str) -> list[str]:
    dev = parse_device(device)
    return [p for p in PRECISIONS if unsupported_reason(engine, dev, p) is None]


def devices() -> list[str]:
    return available_devices()


def settings_from(device: str, precision: str, threads, engine: str) -> RuntimeSettings:
    """Coerce UI values into settings that can run here (an unsupported precision falls back to fp32)."""
    device = device if device in devices() else "cpu"
    engine = engine if engine in engines_for(device) else "stock"
    precision = precision if precision in precisions_for(device, engine) else "fp32"
    threads = int(threads) if threads else None
    return RuntimeSettings(device, precision, threads, engine)
