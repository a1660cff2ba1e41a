"""Timing runs on a device: several runs back to back per sample, on the CPU with the
monotonic clock, on a GPU with CUDA events recorded on the current stream around them
and waited for once, so a run's launch and Python time overlaps the GPU work of the one
before (as in a training step) instead of being counted in full for every run. The
profiler (``cost.profile``) times tasks with them, and the communication calibration
(``cost.comm``) NCCL calls: NCCL's stream joins the current stream before each call and
the current stream waits for it after, so events on the current stream bracket the
communication itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import torch


class Stopped(Exception):
    """A measurement its caller stopped between two samples (Ctrl-C): what it had
    measured of the task is dropped."""


def check_stop(stop: Callable[[], bool] | None) -> None:
    """Raise Stopped when ``stop()`` says so: asked before every sample, so a task of
    thousands of repeats stops within one sample."""
    if stop is not None and stop():
        raise Stopped


class Clock(Protocol):
    """How runs are timed, and memory counted, on one kind of device."""

    def begin(self) -> None:
        """Before the task allocates anything."""

    def time(self, run: Callable[[], object], runs: int) -> float:
        """Seconds per run of ``runs`` runs of ``run`` back to back."""

    def peak_bytes(self, tensors: Sequence[torch.Tensor]) -> int:
        """The task's peak memory (``tensors``: those alive at its end)."""

    def release(self) -> None:
        """Give memory back after a failed task."""


class CpuClock:
    """The monotonic clock; the bytes of the task's tensors (the CPU allocator keeps no
    peak)."""

    def begin(self) -> None:
        pass

    def time(self, run: Callable[[], object], runs: int) -> float:
        start = time.perf_counter()
        for _ in range(runs):
            run()
        return (time.perf_counter() - start) / runs

    def peak_bytes(self, tensors: Sequence[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    def release(self) -> None:
        pass


class CudaClock:
    """CUDA events on the current stream around the runs, one synchronize per sample;
    the allocator's peak above what was allocated before the task."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.before = 0

    def begin(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.before = torch.cuda.memory_allocated(self.device)

    def time(self, run: Callable[[], object], runs: int) -> float:
        stream = torch.cuda.current_stream(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(runs):
            run()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / runs

    def peak_bytes(self, tensors: Sequence[torch.Tensor]) -> int:
        return torch.cuda.max_memory_allocated(self.device) - self.before

    def release(self) -> None:
        torch.cuda.empty_cache()
