"""Timing tasks on the local device with the block kernels the runtime executes.

Each distinct task (``signatures``) runs on random operands of its block shapes: a few
untimed warm-up runs, then ``repeats`` timed runs of the forward pass and, in training,
of the backward pass alone (autograd from a fresh forward each time). On a GPU each run
is timed with CUDA events around the kernel launches and ``torch.cuda.synchronize``; on
the CPU with the monotonic clock, torch computing with the threads of a launch's rank
(the thread count is part of the profile's device name: ``cost.cpu_threads``). The
entry keeps the median and the interquartile range, the repeats, and the peak memory:
on a GPU the allocator's peak above what was allocated before the task, on the CPU the
bytes of the task's tensors (operands, parameters, outputs and gradients; the CPU
allocator keeps no peak). A block too large
for the device is recorded as out of memory instead of stopping the run.

In training, the optimizer update is timed too, for shard sizes up to the largest
parameter (``cost.update``). ``profile_tasks`` skips what the cache already has and
reports every task as a ``ProfileEvent``, so a CLI progress bar or the app can follow
it; it saves the cache every few seconds, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from flextui.cost.cache import ProfileCache, ProfileEntry
from flextui.cost.compare import OpTypeComparison, compare_with_analytic, reference_device
from flextui.cost.estimate import ProfileClock, task_estimates
from flextui.cost.localdevice import LocalDevice, resolve_device
from flextui.cost.signatures import (
    DTYPE_NAMES,
    Measurement,
    TaskSignature,
    origin_block,
    task_signatures,
)
from flextui.cost.update import profile_updates, update_sizes
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.graph.kernels import block_tensors, kernel_for, torch_dtype

SAVE_EVERY_S = 5.0


@dataclass(frozen=True)
class ProfileEvent:
    """One task done: measured now, or found in the cache (``cached``)."""

    done: int
    total: int
    signature: TaskSignature
    entry: ProfileEntry
    cached: bool


@dataclass
class ProfileRun:
    """What profiling a model needs, resolved: the local device, what is measured, the
    distinct tasks and the cache they go into (the CLI and the app both start here)."""

    local: LocalDevice
    measurement: Measurement
    signatures: list[TaskSignature]
    cache: ProfileCache
    update_sizes: list[int] = field(default_factory=list)  # optimizer updates to time

    @property
    def notices(self) -> list[str]:
        return ([self.local.notice] if self.local.notice else []) + self.cache.notices

    def run(self, *, warmup: int = 2, repeats: int = 10,
            on_event: Callable[[ProfileEvent], None] | None = None,
            stop: Callable[[], bool] | None = None) -> int:
        """Measure the tasks and optimizer updates the cache lacks (on the CPU with the
        device's threads); how many tasks were measured."""
        with cpu_threads(self.local.threads):
            measured = profile_tasks(self.signatures, self.cache, self.local.device,
                                     warmup=warmup, repeats=repeats, on_event=on_event,
                                     stop=stop)
            if self.measurement.training:
                profile_updates(self.update_sizes, self.measurement, self.cache,
                                self.local.device, warmup=warmup, repeats=repeats, stop=stop)
        return measured

    def estimates(self, *, warmup: int = 2, repeats: int = 10) -> list[float]:
        """Seconds each task will take to measure, 0 for those cached (``cost.estimate``)."""
        return task_estimates(self.signatures, self.cache, reference_device(self.local.name),
                              warmup=warmup, repeats=repeats, training=self.measurement.training)

    def clock(self, *, warmup: int = 2, repeats: int = 10) -> ProfileClock:
        """A clock for the time this run will take, before and while it runs."""
        return ProfileClock(self.estimates(warmup=warmup, repeats=repeats))

    def comparison(self) -> list[OpTypeComparison]:
        """Measured against analytic times, per op type, for the tasks now cached."""
        return compare_with_analytic(self.signatures, self.cache, reference_device(self.local.name))


def prepare_profile(graph: OpGraph, num_devices: int, *,
                    device: str | LocalDevice | None = None, dtype: str = "fp32",
                    training: bool = True, profiles: str | None = None) -> ProfileRun:
    """Resolve ``device`` (None: the first GPU, else the CPU; a caller that resolved it
    already passes the LocalDevice), open the device kind's cache (``profiles``: the
    user's cache directory if None; one that could not be saved to, from a newer flextui
    say, is refused here, before any work), and collect the distinct tasks a search of
    ``graph`` over up to ``num_devices`` devices may visit."""
    if num_devices < 1:
        raise FlextuiError("--max-devices must be at least 1")
    if dtype not in DTYPE_NAMES:
        raise FlextuiError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPE_NAMES)}")
    local = device if isinstance(device, LocalDevice) else resolve_device(device)
    cache = ProfileCache.open_default(local.name, profiles)
    cache.check_writable()
    measurement = Measurement(DTYPE_NAMES[dtype], training, local.name, torch.__version__)
    signatures = task_signatures(graph, measurement, num_devices=num_devices)
    return ProfileRun(local, measurement, signatures, cache, update_sizes(graph, measurement.dtype))


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """torch computes on the CPU with ``threads`` threads inside (None: as it is)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def profile_tasks(signatures: Sequence[TaskSignature], cache: ProfileCache, device: torch.device,
                  *, warmup: int = 2, repeats: int = 10,
                  on_event: Callable[[ProfileEvent], None] | None = None,
                  stop: Callable[[], bool] | None = None) -> int:
    """Measure every signature the cache lacks on ``device``, put the entries in the
    cache and save it; return how many were measured. ``stop`` is asked between tasks."""
    measured, last_save = 0, time.monotonic()
    try:
        for done, signature in enumerate(signatures, 1):
            if stop is not None and stop():
                break
            entry = cache.get(signature.key)
            cached = entry is not None
            if entry is None:
                entry = time_task(signature, device, warmup=warmup, repeats=repeats)
                cache.put(signature.key, entry)
                measured += 1
            if on_event is not None:
                on_event(ProfileEvent(done, len(signatures), signature, entry, cached))
            if measured and time.monotonic() - last_save >= SAVE_EVERY_S:
                cache.save()
                last_save = time.monotonic()
    finally:
        cache.save()
    return measured


def time_task(signature: TaskSignature, device: torch.device, *, warmup: int = 2,
              repeats: int = 10) -> ProfileEntry:
    """Time one task on ``device`` (see the module docstring)."""
    key = signature.key
    try:
        return _time_task(signature, device, torch_dtype(key.dtype), key.training,
                          warmup, repeats)
    except torch.cuda.OutOfMemoryError:   # torch.OutOfMemoryError from 2.5 on
        _release(device)
        return ProfileEntry(None, None, repeats=0, oom=True)
    except RuntimeError as exc:   # the CPU allocator's out-of-memory is a RuntimeError
        if "can't allocate memory" not in str(exc):
            raise
        return ProfileEntry(None, None, repeats=0, oom=True)


def _time_task(signature: TaskSignature, device: torch.device, dtype: torch.dtype,
               training: bool, warmup: int, repeats: int) -> ProfileEntry:
    op, region = signature.op, origin_block(signature.block)
    kernel = kernel_for(op.type)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    generator = torch.Generator(device=device).manual_seed(0)
    inputs, params = block_tensors(op, region, dtype=dtype, device=device, generator=generator)
    leaves = [t.requires_grad_(training and t.is_floating_point()) for t in (*inputs, *params)]
    wanted = [t for t in leaves if t.requires_grad]
    ins, ps = leaves[:len(inputs)], leaves[len(inputs):]

    def forward():
        with torch.set_grad_enabled(training):
            return kernel.forward_loss(op, region, ins, ps, 0)

    outputs, loss = forward()
    seeds = [torch.randn(o.shape, dtype=o.dtype, device=device, generator=generator)
             if o.requires_grad else None for o in outputs]

    def backward(outputs, loss) -> list:
        roots = [o for o in outputs if o.requires_grad] + ([loss] if loss is not None else [])
        grads = [s for s in seeds if s is not None] + \
            ([torch.ones_like(loss)] if loss is not None else [])
        if not roots or not wanted:
            return []
        return list(torch.autograd.grad(roots, wanted, grads, allow_unused=True))

    timer = _cuda_timer(device) if cuda else _cpu_timer
    fwd, bwd, held = [], [], []
    for i in range(warmup + repeats):
        took, (outputs, loss) = timer(forward)
        if i >= warmup:
            fwd.append(took)
        if training:
            took, held = timer(lambda: backward(outputs, loss))  # noqa: B023 (called at once)
            if i >= warmup:
                bwd.append(took)
    if cuda:
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        peak = sum(t.numel() * t.element_size() for t in (*leaves, *outputs, *held)
                   if t is not None)
    fwd_s, fwd_spread = _median_spread(fwd)
    bwd_s, bwd_spread = _median_spread(bwd) if training else (None, None)
    return ProfileEntry(fwd_s, bwd_s, fwd_spread, bwd_spread, repeats=repeats,
                        peak_memory_bytes=max(0, int(peak)))


def _cpu_timer(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _cuda_timer(device: torch.device):
    stream = torch.cuda.current_stream(device)

    def timer(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        result = fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3, result
    return timer


def _median_spread(times: list[float]) -> tuple[float, float]:
    """The median and the interquartile range."""
    if len(times) < 2:
        return times[0], 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return statistics.median(times), max(0.0, q3 - q1)


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
