"""The optimizer update, measured: each optimizer's step over a parameter shard as a
rank runs it (``cost.update_steps``: SGD with momentum, AdamW), timed on the local
device for shard sizes from 4 KiB up to the graph's largest parameter, doubling.

A roofline guess (passes over the shard at the memory bandwidth) is far off on a
CPU, whose bandwidth is itself a guess, so profiled cost models time updates from these
measurements (interpolated between sizes, ``calibration.interpolate``). Each timed
update starts with the shard out of cache (a buffer twice the last-level cache is
written first), as in a step, where the update comes after the whole backward pass
has been through the cache: timed warm, updates of a few MiB ran 2-4x faster than in a
rank's step. They live in the profile cache beside the tasks, as records of their own
(``UpdateKey``: the optimizer, the shard's bytes, the dtype, the device and torch).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flextui.cost.cache import ProfileCache, UpdateEntry, UpdateKey
from flextui.cost.optimizers import OptimizerKind
from flextui.cost.signatures import Measurement
from flextui.graph import OpGraph
from flextui.graph.tensor import dtype_bytes

if TYPE_CHECKING:   # torch only where updates are timed: simulations start without it
    import torch

MIN_BYTES = 4 * 2**10

#: (shard bytes, seconds) of measured updates, sizes increasing
Table = tuple[tuple[int, float], ...]


def update_sizes(graph: OpGraph, dtype: str) -> list[int]:
    """Shard sizes (bytes) to time: 4 KiB doubling up to the first size that holds the
    graph's largest parameter."""
    width = dtype_bytes(dtype)
    largest = max((p.numel * width for p in graph.parameters.values()), default=MIN_BYTES)
    sizes = [MIN_BYTES]
    while sizes[-1] < largest:
        sizes.append(2 * sizes[-1])
    return sizes


def update_key(measurement: Measurement, nbytes: int, optimizer: OptimizerKind) -> UpdateKey:
    """The cache key of ``optimizer``'s update of an ``nbytes`` shard."""
    return UpdateKey(nbytes, measurement.dtype, measurement.device_name,
                     measurement.torch_version, optimizer)


def cached_updates(cache: ProfileCache, measurement: Measurement, sizes: Sequence[int],
                   optimizer: OptimizerKind) -> Table:
    """The measured updates of ``optimizer`` at ``sizes`` the cache holds."""
    found = []
    for nbytes in sizes:
        update = cache.get_update(update_key(measurement, nbytes, optimizer))
        if update is not None:
            found.append((nbytes, update.seconds))
    return tuple(found)


def profile_updates(sizes: Sequence[int], measurement: Measurement, cache: ProfileCache,
                    device: torch.device, *, warmup: int = 2, repeats: int = 10,
                    stop: Callable[[], bool] | None = None) -> int:
    """Time every optimizer's updates of ``sizes`` the cache lacks into it (saved); how
    many were. ``stop`` is asked before every run: the update it stops is left
    unmeasured."""
    from flextui.cost.clocks import Stopped
    from flextui.graph.kernels import torch_dtype
    measured = 0
    for optimizer in OptimizerKind:
        for nbytes in sizes:
            if stop is not None and stop():
                break
            key = update_key(measurement, nbytes, optimizer)
            if cache.get_update(key) is None:
                try:
                    entry = time_update(nbytes, torch_dtype(measurement.dtype), device,
                                        optimizer, warmup=warmup, repeats=repeats, stop=stop)
                except Stopped:
                    break
                cache.put_update(key, entry)
                measured += 1
    cache.save()
    return measured


def time_update(nbytes: int, dtype: torch.dtype, device: torch.device,
                optimizer: OptimizerKind = OptimizerKind.SGD, *, warmup: int = 2,
                repeats: int = 10, stop: Callable[[], bool] | None = None) -> UpdateEntry:
    """Median seconds of one ``optimizer`` update of an ``nbytes`` shard (under a
    launch's default settings); Stopped when ``stop()`` says so before a run."""
    import torch

    from flextui.cost.clocks import check_stop
    from flextui.cost.update_steps import adamw_step, sgd_step
    numel = nbytes // torch.empty((), dtype=dtype).element_size()
    generator = torch.Generator(device=device).manual_seed(0)
    weight, grad = (torch.randn(numel, dtype=dtype, device=device, generator=generator)
                    for _ in range(2))
    moments = [torch.zeros_like(weight) for _ in range(optimizer.states)]

    def step(t: int) -> None:
        if optimizer == OptimizerKind.ADAMW:
            adamw_step(weight, grad, moments[0], moments[1], lr=0.01, t=t, betas=(0.9, 0.999),
                       eps=1e-8, weight_decay=0.0)
        else:
            sgd_step(weight, grad, moments[0], lr=0.01, momentum=0.9, weight_decay=0.0)

    scratch = torch.empty(_evict_bytes(device) // 4, dtype=torch.float32, device=device)
    cuda = device.type == "cuda"
    times = []
    with torch.no_grad():
        for i in range(warmup + repeats):
            check_stop(stop)
            scratch.fill_(i)   # the shard out of cache
            if cuda:
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            step(i + 1)
            if cuda:
                torch.cuda.synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    spread = statistics.quantiles(times, n=4) if len(times) > 1 else [0.0, 0.0, 0.0]
    return UpdateEntry(statistics.median(times), max(0.0, spread[2] - spread[0]), repeats)


def _evict_bytes(device: torch.device) -> int:
    """Bytes to write to push a shard out of ``device``'s caches: twice its last-level
    cache (the GPU's L2, or the largest CPU cache Linux lists), 64 MiB if unknown."""
    if device.type == "cuda":
        import torch
        found = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    else:
        found = max((_cache_size(path) for path in
                     Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size")),
                    default=0)
    return min(max(2 * found, 64 * 2**20), 2**30)


def _cache_size(path: Path) -> int:
    """A sysfs cache size (``32768K``) in bytes, 0 if it cannot be read."""
    try:
        text = path.read_text().strip()
    except OSError:
        return 0
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale if digits.isdigit() else 0
