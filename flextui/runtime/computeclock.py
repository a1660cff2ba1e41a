"""The time a rank's step spends computing, in all and by kind of task."""

from __future__ import annotations

import time
from typing import Any

import torch

#: one kind of task: an op's index, its block shape, and whether it is the backward pass
TaskKind = tuple[int, tuple[int, ...], bool]


class ComputeClock:
    """The time a step spends computing: wall time on the CPU; on a GPU, CUDA events
    around each stretch of kernels, read once the step is done (no synchronisation
    between tasks). ``by_task`` also sums the time of each task kind named to ``stop``
    (``task_s``, complete once ``seconds`` has been read)."""

    def __init__(self, device: torch.device, by_task: bool = False) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.total = 0.0
        self.spans: list[tuple[Any, Any, TaskKind | None]] = []
        self.by_task = by_task
        self.task_s: dict[TaskKind, float] = {}

    def start(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started: Any, task: TaskKind | None = None) -> None:
        """End a stretch of compute begun at ``started``: the task ``task``'s, if given."""
        if not self.cuda:
            took = time.perf_counter() - started
            self.total += took
            if self.by_task and task is not None:
                self.task_s[task] = self.task_s.get(task, 0.0) + took
            return
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.spans.append((started, event, task if self.by_task else None))

    def seconds(self) -> float:
        if self.spans:
            torch.cuda.synchronize(self.device)
            for a, b, task in self.spans:
                took = a.elapsed_time(b) / 1e3
                self.total += took
                if task is not None:
                    self.task_s[task] = self.task_s.get(task, 0.0) + took
            self.spans.clear()
        return self.total
