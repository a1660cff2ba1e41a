"""What the scheduler reads of a task graph, and the scheduler's event loop.

A task store holds, per task id, the task's duration, its tie-break key (a tuple of at
most 8 ints), the resources (devices and links) it holds, whether it is alive, and
its predecessors and successors; ``TaskGraph`` keeps everything else. Ids of removed
tasks are reused, the last freed first.

There are two stores with the same methods and the same results: ``CTaskStore``, in C
(``_ctaskstore.c``, built when the package is installed), which keeps the data in flat
arrays so the event loop runs without touching Python objects, and ``PyTaskStore``,
the pure-Python reference below. ``new_store`` gives the C one unless it was not built
(no C compiler at install time) or ``FLEXTUI_PURE_PYTHON=1`` is set. Both perform the
same float operations in the same order, so their times are bit-identical; a test
checks it. The C store is what makes a search step cost milliseconds: a one-op change
early in the iteration moves the times of most tasks after it, so every step runs the
event loop over most of the graph.

``reschedule(ready, start, end, t0, changed)`` re-simulates every live task that is in
``changed`` or was ready at ``t0`` or later (see ``schedule``), writing the three
``array('d')`` columns in place, and returns the makespan.
"""

from __future__ import annotations

import heapq
import os
from array import array
from typing import Any, Protocol

try:
    from flextui.sim._ctaskstore import CTaskStore
except ImportError:  # built without a C compiler: the pure-Python store serves
    CTaskStore = None  # type: ignore[assignment,misc]

#: values of FLEXTUI_PURE_PYTHON that leave the C store in use (unset is one too)
_OFF = ("", "0", "false", "no", "off")


class TaskStore(Protocol):
    """What the scheduler and ``TaskGraph`` use of a store (``CTaskStore`` and
    ``PyTaskStore``; ``_ctaskstore.pyi`` types the C one). An id out of range, a
    negative one included, raises IndexError."""

    def __len__(self) -> int: ...
    def add(self, resources: tuple[int, ...], duration: float, key: tuple[int, ...]) -> int: ...
    def link(self, a: int, b: int) -> None: ...
    def remove(self, t: int) -> None: ...
    def detach(self, tasks: list[int]) -> None: ...
    def attach(self, tasks: list[int]) -> None: ...
    def release(self, tasks: list[int]) -> None: ...
    def preds(self, t: int) -> list[int]: ...
    def succs(self, t: int) -> list[int]: ...
    def alive(self, t: int) -> bool: ...
    def duration_of(self, t: int) -> float: ...
    def live_ids(self) -> list[int]: ...
    def reschedule(self, times_ready: array, times_start: array, times_end: array, t0: float,
                   changed: list[int]) -> float: ...


def backend() -> str:
    """Which store and event loop new task graphs use: "C", unless it was not built or
    FLEXTUI_PURE_PYTHON is set to anything but 0/false/no/off; else "Python"."""
    pure = os.environ.get("FLEXTUI_PURE_PYTHON", "").strip().lower() not in _OFF
    return "C" if CTaskStore is not None and not pure else "Python"


def new_store(num_resources: int) -> TaskStore:
    return CTaskStore(num_resources) if backend() == "C" else PyTaskStore(num_resources)


class PyTaskStore:
    def __init__(self, num_resources: int) -> None:
        self.num_resources = num_resources
        self.duration: list[float] = []
        self.key: list[tuple] = []
        self.resources: list[tuple[int, ...]] = []
        self._preds: list[list[int]] = []
        self._succs: list[list[int]] = []
        self._alive: list[bool] = []
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._alive)

    def add(self, resources: tuple[int, ...], duration: float, key: tuple) -> int:
        if len(key) > 8:
            raise ValueError("a task key has at most 8 ints")
        if any(not 0 <= r < self.num_resources for r in resources):
            raise IndexError(f"resource out of range in {resources}")
        row: tuple[Any, ...] = (float(duration), key, resources, [], [], True)
        columns: tuple[list[Any], ...] = (self.duration, self.key, self.resources, self._preds,
                                          self._succs, self._alive)
        if self._free:
            t = self._free.pop()
            for column, value in zip(columns, row):
                column[t] = value
            return t
        for column, value in zip(columns, row):
            column.append(value)
        return len(self._alive) - 1

    def _id(self, t: int) -> int:
        """``t``, if it names a task slot; IndexError otherwise (as the C store)."""
        if not 0 <= t < len(self._alive):
            raise IndexError(f"task id {t} out of range")
        return t

    def link(self, a: int, b: int) -> None:
        self._id(a)
        self._id(b)
        self._succs[a].append(b)
        self._preds[b].append(a)

    def remove(self, t: int) -> None:
        self._id(t)
        for p in self._preds[t]:
            self._succs[p].remove(t)
        for s in self._succs[t]:
            self._preds[s].remove(t)
        self._preds[t], self._succs[t], self._alive[t] = [], [], False
        self._free.append(t)

    def detach(self, tasks: list[int]) -> None:
        """Unhook ``tasks`` from the tasks outside them, keeping their own edge lists."""
        gone = {self._id(t) for t in tasks}
        for t in tasks:
            for p in self._preds[t]:
                if p not in gone:
                    self._succs[p].remove(t)
            for s in self._succs[t]:
                if s not in gone:
                    self._preds[s].remove(t)
            self._alive[t] = False

    def attach(self, tasks: list[int]) -> None:
        """Undo ``detach``."""
        back = {self._id(t) for t in tasks}
        for t in tasks:
            for p in self._preds[t]:
                if p not in back:
                    self._succs[p].append(t)
            for s in self._succs[t]:
                if s not in back:
                    self._preds[s].append(t)
            self._alive[t] = True

    def release(self, tasks: list[int]) -> None:
        """Free detached tasks for good."""
        for t in map(self._id, tasks):
            self._preds[t], self._succs[t] = [], []
            self._free.append(t)

    def preds(self, t: int) -> list[int]:
        return list(self._preds[self._id(t)])

    def succs(self, t: int) -> list[int]:
        return list(self._succs[self._id(t)])

    def alive(self, t: int) -> bool:
        return self._alive[self._id(t)]

    def duration_of(self, t: int) -> float:
        return self.duration[self._id(t)]

    def live_ids(self) -> list[int]:
        return [t for t, alive in enumerate(self._alive) if alive]

    def reschedule(self, times_ready: array, times_start: array, times_end: array, t0: float,
                   changed: list[int]) -> float:
        ready, start, end = times_ready, times_start, times_end
        preds, succs, resources, duration, key = (self._preds, self._succs, self.resources,
                                                  self.duration, self.key)
        free = [0.0] * self.num_resources
        todo = {self._id(t) for t in changed}
        tasks = []
        for t, alive in enumerate(self._alive):
            if not alive:
                continue
            if t in todo or ready[t] >= t0:
                tasks.append(t)
            else:
                e = end[t]
                for res in resources[t]:
                    if e > free[res]:
                        free[res] = e
        todo = set(tasks)
        waiting = {}
        heap = []
        for t in tasks:
            count, r = 0, 0.0
            for p in preds[t]:
                if p in todo:
                    count += 1
                elif end[p] > r:
                    r = end[p]
            ready[t] = r
            if count:
                waiting[t] = count
            else:
                heap.append((r, key[t], t))
        heapq.heapify(heap)
        done = 0
        while heap:
            r, _, t = heapq.heappop(heap)
            s = r
            for res in resources[t]:
                if free[res] > s:
                    s = free[res]
            e = s + duration[t]
            for res in resources[t]:
                free[res] = e
            start[t], end[t] = s, e
            done += 1
            for u in succs[t]:
                if u not in waiting:
                    raise RuntimeError(f"task {u} follows re-simulated task {t} but is not "
                                       "re-simulated itself")
                if e > ready[u]:
                    ready[u] = e
                left = waiting[u] - 1
                if left:
                    waiting[u] = left
                else:
                    del waiting[u]
                    heapq.heappush(heap, (ready[u], key[u], u))
        if done != len(tasks):
            raise RuntimeError(f"task graph has a cycle through {len(tasks) - done} tasks")
        return max(max(free, default=0.0), max((end[t] for t in tasks), default=0.0))
