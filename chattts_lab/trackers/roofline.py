"""The hardware's own floor for a GPT decode step: memory read bandwidth and the weight bytes a step reads.

A decode step multiplies one activation row per batch item by every weight matrix of the GPT. Each
weight byte is fetched from memory once per step and used for only B multiply-adds, so arithmetic is
cheap next to the fetch, and the step cannot finish faster than `weight bytes / read bandwidth`
(`metrics.floor_step_ms`). `roofline` = floor / measured step says how close a configuration gets.

    measure_read_bandwidth(devices)  at a sweep's start and again before each interleaved pass, or each cell of
                                     a one-pass sweep (with_another_read), recorded with the environment
    decode_weight_bytes(model)        once per cell, from the loaded model's real tensors
"""

from __future__ import annotations

import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from chattts_lab.devices import DeviceUnavailable, parse_device, synchronize
from chattts_lab.torch_thread import on_torch_thread
from chattts_lab.trackers.env import usable_cores

log = logging.getLogger(__name__)

MIN_READ_BYTES = 256 * 2**20  # never read less than this, whatever the cache sizes say
CACHE_MULTIPLE = 4  # read this many times the last-level cache, so nearly every byte comes from DRAM
# the median of these: a minority of reads slowed by other work, or sped up by a burst, moves it little (on the build
# VM, one or two reads in five sometimes ran at 45-53 GB/s where the sustained rate was 33; a decode runs at the
# sustained rate, and the best of five had put lab int8's roofline at 0.47-0.58 where it was 0.77)
READ_REPEATS = 5


# ----------------------------------------------------------------------------------------------
# Bandwidth


def last_level_cache_bytes() -> int | None:
    """The largest CPU cache (Linux sysfs); None where the system does not say."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=None)


def _read_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        cache = torch.cuda.get_device_properties(device).L2_cache_size
        return max(4 * MIN_READ_BYTES, CACHE_MULTIPLE * cache)  # GPU memory is plentiful; a longer read times better
    cache = last_level_cache_bytes() if device.type == "cpu" else None
    return max(MIN_READ_BYTES, CACHE_MULTIPLE * (cache or 0))


@on_torch_thread  # torch's reader runs where the model's own OpenMP pool is
def read_gbps(device: str | torch.device = "cpu", nbytes: int | None = None, repeats: int = READ_REPEATS,
              threads: int | None = None) -> dict:
    """Read bandwidth of one device: a sum over an array far larger than its caches, median of `repeats`.

    A streaming sum reads every byte once in order and writes nothing, the access pattern of a decode
    step's weight reads, so it measures the limit that step runs into. Every way of reading gives a
    lower bound, and no single reader reaches the memory's limit on every CPU: numpy's float64 sum
    read about 1.7x as fast as torch's sum on an AVX2 build machine, and about 25 % slower on a Zen 4
    one (its chain of adds, not memory, being the limit there). So on CPU both read the same array, split
    over all the cores this process may use (one core rarely reaches a machine's DRAM bandwidth), and
    the faster reader's median counts; the method names it and the other's figure. On CUDA it is
    `torch.sum` on the device. Returns {"gbps": 1e9 bytes per second, "method": how it was measured}.
    """
    device = parse_device(str(device))
    nbytes = nbytes or _read_bytes(device)
    if device.type != "cpu":
        seconds = _median_seconds(_torch_reader(nbytes, device), repeats)
        how = f"torch.sum over {nbytes / 2**20:.0f} MiB float32 on {device}"
        return {"gbps": nbytes / seconds / 1e9, "method": f"{how}, median of {repeats} after a warm-up"}
    threads = threads or usable_cores()
    gbps = {name: nbytes / seconds / 1e9 for name, seconds in _cpu_read_seconds(nbytes, threads, repeats).items()}
    best = max(gbps, key=gbps.get)
    others = "; ".join(f"{name} {value:.1f} GB/s" for name, value in gbps.items() if name != best)
    how = f"{best} over {nbytes / 2**20:.0f} MiB in {threads} threads, median of {repeats} after a warm-up"
    return {"gbps": gbps[best], "method": f"{how} (the faster reader; {others})"}


def _median_seconds(read, repeats: int) -> float:
    read()  # warm-up: threads started, kernels loaded, every page touched
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        read()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def _cpu_read_seconds(nbytes: int, threads: int, repeats: int) -> dict[str, float]:
    """Median seconds of each CPU reader over one array: numpy's float64 sum from `threads` Python threads
    (numpy releases the GIL while it sums), and torch's float32 sum on `threads` intra-op threads."""
    data = np.ones(nbytes // 8)  # written once, so every page is mapped
    slices = np.array_split(data, threads)
    with ThreadPoolExecutor(threads) as pool:
        numpy_s = _median_seconds(lambda: list(pool.map(np.sum, slices)), repeats)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch_s = _median_seconds(torch.from_numpy(data).view(torch.float32).sum, repeats)
    finally:
        torch.set_num_threads(saved)
    return {"numpy float64 sum": numpy_s, "torch float32 sum": torch_s}


def _torch_reader(nbytes: int, device: torch.device):
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)

    def read():
        x.sum()
        synchronize(device)  # the clock reads finished work, not a queued kernel

    return read


def measure_read_bandwidth(devices) -> dict:
    """Bandwidth of each present device of a sweep, keyed as the cells record their effective device.

    Returns {"mem_read_gbps": {device: GB/s}, "mem_read_method": {device: how}, "mem_read_s": [seconds]}, merged
    into the sweep's environment; `mem_read_s` is what the read cost the sweep (every device, set-up included), kept
    so that an estimate of the next sweep here counts its reads at this machine's own price (`grid.read_s_here`).
    A device that is absent is left out (its cells are skipped rows anyway).
    """
    gbps, method, t0 = {}, {}, time.perf_counter()
    for name in dict.fromkeys(devices):
        try:
            device = str(parse_device(name))
        except DeviceUnavailable:
            continue
        if device not in gbps:
            measured = read_gbps(device)
            gbps[device], method[device] = measured["gbps"], measured["method"]
            log.info("memory read bandwidth of %s: %.1f GB/s (%s)", device, measured["gbps"], measured["method"])
    return {"mem_read_gbps": gbps, "mem_read_method": method, "mem_read_s": [round(time.perf_counter() - t0, 3)]}


def with_another_read(environment: dict, measured: dict) -> dict:
    """The environment with one more read of each device's bandwidth (`measured`, as `measure_read_bandwidth`
    returns it): every read is kept in `mem_read_gbps_reads`, and `mem_read_gbps` becomes their median.

    Why: an interleaved sweep reads again before each pass (a one-pass sweep before each cell, whose row takes
    that read: `interleave.read_bandwidth_again`). A VM's bandwidth can change with its neighbours'
    load for minutes at a time (one build VM read 49-55 GB/s in some minutes and 80-92 in others), and a single
    read at the start can stand for a regime the cells never ran in; the median of reads spread over the
    passes is taken where the cells' own figures are, across the same passes.
    """
    gbps = dict(environment.get("mem_read_gbps") or {})
    reads = {device: list(values) for device, values in (environment.get("mem_read_gbps_reads") or {}).items()}
    for device, value in measured["mem_read_gbps"].items():
        if device in gbps:  # a device the sweep measured at its start
            reads[device] = [*reads.get(device, [gbps[device]]), value]
            gbps[device] = statistics.median(reads[device])
    seconds = [*(environment.get("mem_read_s") or []), *(measured.get("mem_read_s") or [])]
    return {**environment, "mem_read_gbps": gbps, "mem_read_gbps_reads": reads, "mem_read_s": seconds}


def with_bandwidth(result, environment: dict):
    """A CellResult carrying the GB/s its sweep measured for the device the cell actually ran on (None if not
    measured: an older sweep resumed), from which its row derives `floor_step_ms` and `roofline`."""
    device = result.effective.get("device")
    return replace(result, mem_read_gbps=(environment.get("mem_read_gbps") or {}).get(device) if device else None)


# ----------------------------------------------------------------------------------------------
# Weight bytes a decode step reads


def decode_weight_bytes(model) -> int:
    """Bytes of GPT weights one audio-code decode step reads, in the formats that took effect.

    Counted: the 20 (or, for synthetic-tiny, 2) transformer layers' projections and norms, the final
    norm, and the 4 code heads that turn the hidden state into logits, as the loaded model holds
    them (fp16/bf16 GPTs at 2 bytes, int8 as int8 values plus per-channel scales, int4 as its packed
    nibbles plus group scales; the code heads fp32, or int8 under lab int8/int4). Not counted: the text embedding
    table and the text head (the refine pass, not this step), and the code embeddings (a step looks
    up 4 rows of them, not the table). Non-persistent buffers (rotary frequencies) are a few hundred
    bytes and are not weights. The KV cache a step also reads grows with position and batch and is not
    counted either (20 layers x 2 x 768 floats per token: about 10 MB on average over 128 fp32 tokens), so the
    floor is a lower bound.
    A batched step reads the weights once for all its items: the floor is the same at every batch size.
    """
    return model.engine.weight_bytes_per_step()  # each engine counts the formats it holds


def module_weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's weights: parameters and persistent buffers, plus fbgemm packed int8 weights,
    counted once each from the packed object itself (stock's quantized Linear and the lab's int8 both
    hold one; stock's state_dict also lists it, as a tuple, which is skipped)."""
    state = sum(tensor_bytes(v) for v in module.state_dict(keep_vars=True).values() if isinstance(v, torch.Tensor))
    packed = sum(_unpacked_bytes(v) for sub in module.modules() for v in vars(sub).values()
                 if isinstance(v, torch.ScriptObject))
    return state + packed


def _unpacked_bytes(packed) -> int:
    """fbgemm's packed int8 linear weight, measured through its unpacked (int8 weight, bias): same values."""
    try:
        weight, bias = torch.ops.quantized.linear_unpack(packed)
    except (RuntimeError, TypeError):  # some other kind of script object: no weights we can see
        return 0
    return tensor_bytes(weight) + (tensor_bytes(bias) if bias is not None else 0)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor's values occupy; a quantized tensor adds one float32 scale per channel it is scaled by."""
    if t.is_quantized:
        per_channel = t.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric)
        scales = t.q_per_channel_scales().numel() if per_channel else 1
        return t.numel() * t.element_size() + 4 * scales
    return t.numel() * t.element_size()
