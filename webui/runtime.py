"""Runtime choices for a request: only what exists on this machine is offered."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from chattts_lab import LoadConfig, available_devices
from chattts_lab.devices import parse_device
from chattts_lab.env import usable_cores
from chattts_lab.precision import ENGINES, PRECISIONS, extra_precisions, unsupported_reason


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


@dataclass(frozen=True)
class ServingChoice:
    """The configuration requests run on unless a person picks another, and why (the page shows both)."""

    settings: RuntimeSettings
    reason: str
    fastest: RuntimeSettings | None = None  # one click away when it is not already in use


def serving_choice(history_db) -> ServingChoice:
    """This machine's latest sweep's recommendation; without one, the fastest configuration that computes the
    same audio as stock (lab fp32), with lab int8 one click away."""
    from chattts_lab.recommend import recommend
    from chattts_lab.store import cells_frame, sweeps_frame

    sweeps = sweeps_frame(history_db)
    local = sweeps[(sweeps["origin"] == "local") & (sweeps["kind"] == "sweep")] if not sweeps.empty else sweeps
    for sweep_id in local["id"].head(1):
        rec = recommend(cells_frame(history_db, [int(sweep_id)]))
        if rec.settings and rec.settings["device"] in devices():
            settings = settings_from(**rec.settings)
            return ServingChoice(settings, f"the recommendation of sweep #{int(sweep_id)} on this machine "
                                           f"(lowest RTF at batch 1)")
    cores = max_threads()
    if "lab" not in engines_for("cpu"):
        return ServingChoice(RuntimeSettings("cpu", "fp32", cores, "stock"), "no sweep on this machine yet")
    fastest = settings_from("cpu", "int8", cores, "lab")
    return ServingChoice(RuntimeSettings("cpu", "fp32", cores, "lab"),
                         "no sweep on this machine yet: lab fp32 computes the same audio as stock fp32, faster; "
                         "lab int8 is faster still (its audio differs slightly)", fastest)


def describe(settings: RuntimeSettings) -> str:
    return f"{settings.engine} · {settings.precision} · {settings.device} · {plural(settings.threads, 'thread')}"


def plural(n, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def max_threads() -> int:
    return usable_cores()


def default_settings() -> RuntimeSettings:
    return RuntimeSettings(threads=max_threads())


def all_precisions() -> tuple[str, ...]:
    """Every precision some engine implements, each once (two engines may share an extra one, as int4)."""
    return tuple(dict.fromkeys(PRECISIONS + tuple(p for e in ENGINES for p in extra_precisions(e))))


def engines_for(device: str) -> list[str]:
    return [e for e in ENGINES if precisions_for(device, e)]


def precisions_for(device: str, engine: str) -> list[str]:
    """The precisions `engine` runs on `device` here: the one place the UI's precision lists come from."""
    dev = parse_device(device)
    return [p for p in all_precisions() if unsupported_reason(engine, dev, p) is None]


def devices() -> list[str]:
    return available_devices()


def settings_from(device: str, precision: str, threads, engine: str) -> RuntimeSettings:
    """Coerce UI values into settings that can run here (an unsupported precision falls back to fp32)."""
    device = device if device in devices() else "cpu"
    engine = engine if engine in engines_for(device) else "stock"
    precision = precision if precision in precisions_for(device, engine) else "fp32"
    threads = int(threads) if threads else None
    return RuntimeSettings(device, precision, threads, engine)
