"""The local device a profile is measured on, from what the user asked for."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass

import torch

from flextui.cost.cpu_threads import with_threads
from flextui.errors import FlextuiError
from flextui.machine.cpus import CPU_NAME_PREFIX
from flextui.machine.detect import rank_threads


@dataclass(frozen=True)
class LocalDevice:
    device: torch.device
    name: str                  # what profiles record: the CUDA name, or "cpu: <model>, N threads"
    notice: str | None = None  # said to the user (e.g. no GPU: measuring on the CPU)
    threads: int | None = None  # on the CPU: the threads tasks are timed with


def resolve_device(wanted: str | None) -> LocalDevice:
    """``--device``: ``cuda:N``, ``cuda`` (= ``cuda:0``), ``cpu``, or None (the first GPU,
    else the CPU with a notice). A device that does not exist is a FlextuiError. The
    CPU is timed with the threads of a launch's rank (``machine.detect.rank_threads``),
    and its name says how many (``cost.cpu_threads``)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted is None:
        if gpus:
            return _gpu(0)
        threads = rank_threads()
        return LocalDevice(torch.device("cpu"), cpu_name(threads),
                           "no GPU is visible to torch: profiling on the CPU with "
                           f"{threads} thread{'s' if threads > 1 else ''}, as a launch's rank "
                           "(its times apply to simulated CPU devices only)", threads)
    if wanted == "cpu":
        threads = rank_threads()
        return LocalDevice(torch.device("cpu"), cpu_name(threads), threads=threads)
    match = re.fullmatch(r"cuda(?::(\d+))?", wanted)
    if match is None:
        raise FlextuiError(f"--device {wanted!r}: write cuda:N (e.g. cuda:0) or cpu")
    index = int(match.group(1) or 0)
    if not gpus:
        raise FlextuiError(f"--device {wanted}: no GPU is visible to torch on this machine "
                           f"(torch {torch.__version__}, CUDA available: "
                           f"{torch.cuda.is_available()}); use --device cpu")
    if index >= gpus:
        have = ", ".join(f"cuda:{i}" for i in range(gpus))
        raise FlextuiError(f"--device {wanted}: this machine has {gpus} GPU"
                           f"{'s' if gpus > 1 else ''} ({have}); choose one of them")
    return _gpu(index)


def _gpu(index: int) -> LocalDevice:
    return LocalDevice(torch.device("cuda", index), torch.cuda.get_device_name(index))


def cpu_name(threads: int | None = None) -> str:
    """``"cpu: <model name>, N threads"``, the model from /proc/cpuinfo (Linux), else the
    platform's word; ``threads`` defaults to a launch's rank's (``rank_threads``)."""
    return with_threads(CPU_NAME_PREFIX + _cpu_model(),
                        rank_threads() if threads is None else threads)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
