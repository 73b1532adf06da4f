"""Derived metrics, each defined once with its formula. Everything else calls these."""

from __future__ import annotations

SAMPLE_RATE = 24_000
SAMPLES_PER_STEP_PAIR = 256  # Vocos hop length: one mel frame
SAMPLES_PER_TOKEN = 2 * SAMPLES_PER_STEP_PAIR  # one GPT step (audio token) = 2 mel frames
STEPS_PER_AUDIO_SECOND = SAMPLE_RATE / (2 * SAMPLES_PER_STEP_PAIR)  # 46.875: one GPT step = 2 mel frames


def samples_for_tokens(tokens: int) -> int:
    """Audio samples ChatTTS decodes from N audio tokens: (2N - 1) * 256 (centered STFT drops one hop)."""
    return max(0, (2 * tokens - 1) * SAMPLES_PER_STEP_PAIR)


def audio_seconds(tokens: int) -> float:
    return samples_for_tokens(tokens) / SAMPLE_RATE


def rtf(wall_s: float, audio_s: float) -> float | None:
    """Real-time factor = wall seconds / seconds of audio of one item. Below 1 is faster than real time."""
    return wall_s / audio_s if audio_s > 0 else None


def x_realtime(wall_s: float, audio_s: float) -> float | None:
    """How many times faster than real time: audio seconds / wall seconds (1 / RTF)."""
    return audio_s / wall_s if wall_s > 0 else None


def audio_s_per_s(total_audio_s: float, wall_s: float) -> float | None:
    """Aggregate throughput: audio seconds produced over the whole batch per wall second."""
    return total_audio_s / wall_s if wall_s > 0 else None


def tokens_per_s(total_tokens: int, wall_s: float) -> float | None:
    """Audio tokens generated over the whole batch per wall second."""
    return total_tokens / wall_s if wall_s > 0 else None


def step_ms(decode_s: float, decode_steps: int) -> float | None:
    """Milliseconds per GPT decode step (prefill excluded): decode seconds / decode steps * 1000."""
    return decode_s / decode_steps * 1000 if decode_steps > 0 else None


def floor_step_ms(weight_mb: float, read_gbps: float) -> float | None:
    """The fastest a decode step can be: the weights it reads at the memory's read bandwidth.
    MB are 1e6 bytes and GB/s 1e9 bytes/s, so MB / (GB/s) is milliseconds."""
    return weight_mb / read_gbps if read_gbps and read_gbps > 0 else None


def roofline(floor_ms: float, measured_step_ms: float) -> float | None:
    """Fraction of the hardware's floor reached: floor_step_ms / step_ms. 1.0 is at the floor, 0.5 twice as slow."""
    return floor_ms / measured_step_ms if measured_step_ms and measured_step_ms > 0 else None


def usd_per_audio_hour(usd_per_machine_hour: float | None, audio_s_per_s: float | None) -> float | None:
    """What an hour of audio costs: the machine's price per hour / the audio hours it makes per hour.

    Audio hours made per machine-hour = audio seconds per wall second (`audio_s_per_s`), so a $0.067/h machine making
    3.9 audio s/s costs $0.017 per audio hour. For a capacity, pass the real-time streams held: each plays one audio
    second per second, so N streams make N audio hours an hour."""
    if usd_per_machine_hour is None or not audio_s_per_s or audio_s_per_s <= 0:
        return None
    return usd_per_machine_hour / audio_s_per_s
