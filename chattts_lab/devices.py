"""Which devices this machine has, and strict parsing of a device name (never a silent fallback)."""

from __future__ import annotations

import torch


class DeviceUnavailable(ValueError):
    """The requested device does not exist on this machine."""


def available_devices() -> list[str]:
    """Devices a user can pick here, best first is not implied: CPU always, then each CUDA GPU, then MPS."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def parse_device(name: str) -> torch.device:
    """'cpu', 'cuda', 'cuda:N' or 'mps' -> torch.device, raising DeviceUnavailable when absent."""
    text = (name or "").strip().lower()
    if text == "cuda":
        text = "cuda:0"
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise DeviceUnavailable(f"unknown device {name!r}: use cpu, cuda, cuda:N or mps") from exc
    if device.type not in ("cpu", "cuda", "mps"):
        raise DeviceUnavailable(f"unsupported device type {device.type!r}: use cpu, cuda, cuda:N or mps")
    if device.type == "cpu":
        return torch.device("cpu")
    canonical = f"cuda:{device.index or 0}" if device.type == "cuda" else "mps"
    if canonical not in available_devices():
        present = ", ".join(available_devices())
        raise DeviceUnavailable(f"device {name!r} is not present on this machine (present: {present})")
    return torch.device(canonical)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so a clock read after it measures finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
