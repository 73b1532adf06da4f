"""Runtime choices for a request: only what exists on this machine is offered."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chattts_lab import LoadConfig, available_devices
from chattts_lab.devices import DeviceUnavailable, parse_device
from chattts_lab.trackers.env import usable_cores
from chattts_lab import engines
from chattts_lab.engines import DEFAULT_ENGINE, DEFAULT_PRECISION, runnable_engines, runnable_precisions, unsupported_reason


@dataclass(frozen=True)
class RuntimeSettings:
    """Kept per user in gr.State; turned into a LoadConfig for each request."""

    device: str = "cpu"
    precision: str = DEFAULT_PRECISION
    threads: int | None = None
    engine: str = DEFAULT_ENGINE

    def load_config(self, model: str) -> LoadConfig:
        return LoadConfig(model=model, device=self.device, precision=self.precision, threads=self.threads, engine=self.engine)

    def as_dict(self) -> dict:
        return asdict(self)


CHOSEN = "chosen on"  # a reason that starts so names a person's (or the command line's) choice, kept over a sweep's
ON_THIS_PAGE = f"{CHOSEN} this page"


@dataclass(frozen=True)
class ServingChoice:
    """The configuration requests run on unless a person picks another, and why (the page shows both)."""

    settings: RuntimeSettings
    reason: str
    fastest: RuntimeSettings | None = None  # one click away when it is not already in use


def serving_choice(history_db, model: str) -> ServingChoice:
    """What requests run on unless a person picks another: the default for this CPU (engines.SERVED_DEFAULTS: lab
    int8 on the lab's kernels for this CPU's level), replaced only by a configuration a sweep of this machine and
    model measured faster (chattts_lab.history.recommend.served_default), with the fastest measured one a click away."""
    from chattts_lab.history.recommend import served_default
    from chattts_lab.history.frames import cells_frame, sweeps_frame

    cores = max_threads()
    engine, precision = engines.served_default("cpu")
    default = RuntimeSettings("cpu", precision, cores, engine)
    sweeps = sweeps_frame(history_db)
    if sweeps.empty:
        return _before_any_sweep(default)
    chosen = served_default(cells_frame(history_db), sweeps, model, default.as_dict(), cannot_run_here)
    fastest = RuntimeSettings(**chosen.fastest) if chosen.fastest else None
    return ServingChoice(RuntimeSettings(**chosen.settings), chosen.reason, fastest)


def _before_any_sweep(default: RuntimeSettings) -> ServingChoice:
    """The CPU's default, why, and the faster configuration one click away (engines.FASTEST_UNMEASURED)."""
    engine, precision = engines.FASTEST_UNMEASURED
    runs = cannot_run_here({"device": "cpu", "engine": engine, "precision": precision}) is None
    fastest = RuntimeSettings("cpu", precision, default.threads, engine) if runs else None
    same = engines.SAME_AUDIO_AS_REFERENCE
    exact = "" if (default.engine, default.precision) in (engines.REFERENCE, same) else (
        f"; {same[0]} {same[1]} computes stock fp32's audio")
    faster = f"; {engine} {precision} is faster still (its audio differs more)" if runs else ""
    return ServingChoice(default, f"no sweep on this machine yet: {engines.served_default_reason('cpu')}{exact}"
                                  f"{faster}", fastest)


def cannot_run_here(settings: dict) -> str | None:
    """Why this app cannot serve these settings (None when it can): an absent device, an engine or precision
    that does not run on it."""
    try:
        device = parse_device(settings["device"])
    except DeviceUnavailable as exc:
        return str(exc)
    return unsupported_reason(settings["engine"], device, settings["precision"])


def describe(settings: RuntimeSettings) -> str:
    threads = "torch's default threads" if settings.threads is None else plural(settings.threads, "thread")
    return f"{settings.engine} · {settings.precision} · {settings.device} · {threads}"


def plural(n, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def max_threads() -> int:
    return usable_cores()


def default_settings() -> RuntimeSettings:
    return RuntimeSettings(threads=max_threads())


def engines_for(device: str) -> list[str]:
    return runnable_engines(parse_device(device))


def precisions_for(device: str, engine: str) -> list[str]:
    """The one list of precisions the page offers for an engine on a device (the registry's, as it runs here)."""
    return runnable_precisions(parse_device(device), engine)


def devices() -> list[str]:
    return available_devices()


def settings_from(device: str, precision: str, threads, engine: str) -> RuntimeSettings:
    """UI values as settings; what cannot run here is refused with the reason, never replaced silently."""
    settings = RuntimeSettings(device, precision, int(threads) if threads else None, engine)
    reason = cannot_run_here(settings.as_dict())
    if reason:
        raise ValueError(f"{describe(settings)} cannot run here: {reason}")
    return settings
