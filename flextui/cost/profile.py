"""Timing tasks on the local device with the block kernels the runtime executes.

Each distinct task (``signatures``) runs on random operands of its block shapes (a
graph input's task makes its block of synthetic data, as a launch's does): a few
untimed warm-up runs, then ``repeats`` timed samples of the forward pass and, in
training, of the backward pass alone (autograd over the last forward's graph, kept for
the next backward). A sample is several runs back to back, as many as make it last a
millisecond (sized by one timed run; at most 100: ``estimate.runs_per_sample``), and its
time per run is what is kept: on a GPU CUDA events on the current stream around the
runs, waited for once per sample, so the launch and Python time of one run overlaps the
kernels of the one before, as in a step, instead of being counted in full for every
small block; on the CPU the monotonic clock, torch computing with the threads of a
launch's rank (the thread count is part of the profile's device name:
``cost.cpu_threads``). Runs reuse their operands, so blocks that fit in the GPU's L2
cache (40-50 MiB on A100 and H100) are timed with their operands in it, as in a step
where the producer has just written them; the optimizer update, below, is timed cold.
The entry keeps the median and the interquartile range of the samples, the repeats, and
the peak memory: on a GPU the allocator's peak above what was allocated before the task,
on the CPU the bytes of the task's tensors (operands, parameters, outputs and gradients;
the CPU allocator keeps no peak). Every run releases the previous run's outputs and
gradients before it allocates, so the peak is one forward and backward's. A block the
device cannot run, out of memory or with a device error on it (cuBLAS out of memory, a
CUDA error, an index too large: ``_block_failure``), is recorded as having no times (an
``oom`` entry) and profiling goes on; if the device no longer works after it, the run
stops with what it measured saved.

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
from flextui.cost.clocks import Clock, CpuClock, CudaClock, Stopped, check_stop
from flextui.cost.compare import OpTypeComparison, compare_with_analytic, reference_device
from flextui.cost.estimate import ProfileClock, runs_per_sample, task_estimates
from flextui.cost.localdevice import LocalDevice, resolve_device
from flextui.cost.mathmode import measurement_now
from flextui.cost.signatures import (
    DTYPE_NAMES,
    Measurement,
    TaskSignature,
    origin_block,
    task_signatures,
)
from flextui.cost.update import profile_updates, update_sizes
from flextui.errors import FlextuiError
from flextui.graph import FLOAT_DTYPES, OpGraph
from flextui.graph.kernels import block_tensors, kernel_for, torch_dtype
from flextui.graph.kernels.synthetic import input_block

SAVE_EVERY_S = 5.0


@dataclass(frozen=True)
class ProfileEvent:
    """One task done: measured now, or found in the cache (``cached``); ``failure`` says
    why a task measured now has no times (out of memory, or an error of the device)."""

    done: int
    total: int
    signature: TaskSignature
    entry: ProfileEntry
    cached: bool
    failure: str | None = None


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
    measurement = measurement_now(DTYPE_NAMES[dtype], training, local.name)
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
    cache and save it; return how many were measured. ``stop`` is asked before every
    sample of a task: the task it stops is left unmeasured."""
    measured, last_save = 0, time.monotonic()
    try:
        for done, signature in enumerate(signatures, 1):
            if stop is not None and stop():
                break
            entry, failure = cache.get(signature.key), None
            cached = entry is not None
            if entry is None:
                try:
                    entry, failure = attempt_task(signature, device, warmup=warmup,
                                                  repeats=repeats, stop=stop)
                except Stopped:
                    break
                cache.put(signature.key, entry)
                measured += 1
                if failure is not None:
                    _check_usable(device, signature, failure)
            if on_event is not None:
                on_event(ProfileEvent(done, len(signatures), signature, entry, cached, failure))
            if measured and time.monotonic() - last_save >= SAVE_EVERY_S:
                cache.save()
                last_save = time.monotonic()
    finally:
        cache.save()
    return measured


def _check_usable(device: torch.device, signature: TaskSignature, failure: str) -> None:
    """Raise FlextuiError when the device cannot go on after a task's failure (a CUDA
    error that poisons the process, such as an illegal address): the failed task is in
    the cache as failed, so a new run skips it."""
    if device.type != "cuda":
        return
    try:
        torch.cuda.synchronize(device)   # a sticky error shows here
    except RuntimeError as exc:
        block = "x".join(map(str, signature.block))
        raise FlextuiError(f"profiling stopped: {signature.op.type} block {block} failed "
                           f"({failure}) and {device} no longer works in this process "
                           f"({_first_line(exc)}); "
                           "what was measured is saved and the block is recorded as failed: "
                           "run the profile again to go on") from None


def time_task(signature: TaskSignature, device: torch.device, *, warmup: int = 2,
              repeats: int = 10) -> ProfileEntry:
    """Time one task on ``device`` (see the module docstring)."""
    return attempt_task(signature, device, warmup=warmup, repeats=repeats)[0]


def attempt_task(signature: TaskSignature, device: torch.device, *, warmup: int = 2,
                 repeats: int = 10, stop: Callable[[], bool] | None = None,
                 ) -> tuple[ProfileEntry, str | None]:
    """Time one task: its entry, and why it has no times when it could not run (out of
    memory, or an error of the device on this block: ``_block_failure``); Stopped when
    ``stop()`` says so before a sample."""
    key = signature.key
    clock = CudaClock(device) if device.type == "cuda" else CpuClock()
    try:
        return _time_task(signature, device, torch_dtype(key.dtype), key.training,
                          warmup, repeats, clock, stop), None
    except RuntimeError as exc:   # torch.OutOfMemoryError and torch.AcceleratorError are
        failure = _block_failure(exc, device)
        if failure is None:
            raise
    # here, not in the except: its traceback holds the task's tensors until it ends
    clock.release()
    return ProfileEntry(None, None, repeats=0, oom=True), failure


#: what a GPU's errors say when one block cannot run there (out of memory in a library,
#: a launch or index too large for the block), rather than a fault of flextui's
_DEVICE_ERRORS = ("CUDA error", "CUBLAS_STATUS", "CUDNN_STATUS", "cuDNN error", "32-bit index",
                  "canUse32BitIndexMath", "out of memory")


def _block_failure(exc: RuntimeError, device: torch.device) -> str | None:
    """Why a block could not run, when ``exc`` says it is the block's size or the device
    (kept per task, as out of memory is); None when it is a fault to raise."""
    text, line = str(exc), _first_line(exc)
    if isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in text:
        return f"out of memory ({line})"
    if device.type == "cuda" and (isinstance(exc, torch.AcceleratorError)
                                  or any(marker in text for marker in _DEVICE_ERRORS)):
        return line
    return None


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 200 characters."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def _time_task(signature: TaskSignature, device: torch.device, dtype: torch.dtype,
               training: bool, warmup: int, repeats: int, clock: Clock,
               stop: Callable[[], bool] | None = None) -> ProfileEntry:
    op, region = signature.op, origin_block(signature.block)
    if op.type == "input":
        return _time_input(signature, device, dtype, training, warmup, repeats, clock, stop)
    kernel = kernel_for(op.type)
    clock.begin()
    generator = torch.Generator(device=device).manual_seed(0)
    inputs, params = block_tensors(op, region, dtype=dtype, device=device, generator=generator)
    leaves = [t.requires_grad_(training and t.is_floating_point()) for t in (*inputs, *params)]
    ins, ps = leaves[:len(inputs)], leaves[len(inputs):]
    runs = _Runs(lambda: kernel.forward_loss(op, region, ins, ps, 0), training,
                 [t for t in leaves if t.requires_grad], generator)
    for _ in range(warmup):
        check_stop(stop)
        runs.forward()
        runs.backward()
    fwd_runs = runs_per_sample(clock.time(runs.forward, 1))
    bwd_runs = runs_per_sample(clock.time(runs.backward, 1)) if training else 0
    fwd, bwd = [], []
    for _ in range(repeats):
        check_stop(stop)
        fwd.append(clock.time(runs.forward, fwd_runs))
        if training:
            bwd.append(clock.time(runs.backward, bwd_runs))
    peak = clock.peak_bytes((*leaves, *runs.alive()))
    fwd_s, fwd_spread = _median_spread(fwd)
    bwd_s, bwd_spread = _median_spread(bwd) if training else (None, None)
    return ProfileEntry(fwd_s, bwd_s, fwd_spread, bwd_spread, repeats=repeats,
                        peak_memory_bytes=max(0, int(peak)))


def _time_input(signature: TaskSignature, device: torch.device, dtype: torch.dtype,
                training: bool, warmup: int, repeats: int, clock: Clock,
                stop: Callable[[], bool] | None) -> ProfileEntry:
    """An input op's task: making its block of the batch from the seed, as a launch on
    synthetic data does (integer data below 2: the bound a run takes from the op's
    consumers changes the values, not the work); no backward pass."""
    op = signature.op
    region = op.output_regions(origin_block(signature.block))[0]
    bound = None if op.outputs[0].dtype in FLOAT_DTYPES else 2
    steps = iter(range(1 << 62))   # each run a new step's data, as each step of a run

    def make() -> torch.Tensor:
        return input_block(op, region, 0, next(steps), dtype, bound, device)

    clock.begin()
    for _ in range(warmup):
        check_stop(stop)
        make()
    runs = runs_per_sample(clock.time(make, 1))
    times = []
    for _ in range(repeats):
        check_stop(stop)
        times.append(clock.time(make, runs))
    forward_s, spread = _median_spread(times)
    return ProfileEntry(forward_s, 0.0 if training else None, spread,
                        0.0 if training else None, repeats=repeats,
                        peak_memory_bytes=clock.peak_bytes([make()]))


class _Runs:
    """A task's forward and backward runs. Each forward releases the previous one's
    outputs, graph and gradients before it allocates, and each backward the previous
    gradients (it runs on the last forward's graph, kept for the next backward), so
    the peak memory is one forward and backward's, not two."""

    def __init__(self, forward: Callable[[], tuple[list[torch.Tensor], torch.Tensor | None]],
                 training: bool, wanted: list[torch.Tensor], generator: torch.Generator) -> None:
        self._forward, self.training, self.wanted = forward, training, wanted
        self.outputs: list[torch.Tensor] = []
        self.loss: torch.Tensor | None = None
        self.grads: list[torch.Tensor | None] = []
        self.outputs, self.loss = self._run_forward()
        self.seeds = [torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=generator)
                      if o.requires_grad else None for o in self.outputs]

    def _run_forward(self) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        with torch.set_grad_enabled(self.training):
            return self._forward()

    def forward(self) -> None:
        self.outputs, self.loss, self.grads = [], None, []
        self.outputs, self.loss = self._run_forward()

    def backward(self) -> None:
        if not self.training:
            return
        self.grads = []
        roots = [o for o in self.outputs if o.requires_grad] + \
            ([self.loss] if self.loss is not None else [])
        seeds = [s for s in self.seeds if s is not None] + \
            ([torch.ones_like(self.loss)] if self.loss is not None else [])
        if roots and self.wanted:
            self.grads = list(torch.autograd.grad(roots, self.wanted, seeds, retain_graph=True,
                                                  allow_unused=True))

    def alive(self) -> list[torch.Tensor]:
        """The tensors of the last runs: outputs, loss and gradients."""
        return [t for t in (*self.outputs, self.loss, *self.grads) if t is not None]


def _median_spread(times: list[float]) -> tuple[float, float]:
    """The median and the interquartile range."""
    if len(times) < 2:
        return times[0], 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return statistics.median(times), max(0.0, q3 - q1)
