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
checks it.

``reschedule(ready, start, end, order, t0, changed, removed)`` re-simulates after an
edit, writing the columns in place, and returns the makespan. ``order`` (an
``array('i')``, a slot per task) holds the live tasks in the order the last run
simulated them, then -1 (or only -1: no last run, simulate every task). The tasks of
that order ready before ``t0`` keep their times (see ``schedule``); ``changed`` (added
tasks) and the live successors of ``removed`` ones are simulated afresh. Every other
task is re-timed only if a predecessor's end time changed (it is then queued on its
new ready time) or a task ahead of it on one of its resources changed (its start is
recomputed as it is passed): the loop walks the last order and merges in the queue,
so a task whose predecessors kept their times keeps its place in the order without a
queue operation, and dead tasks are never visited but for the ones just removed.
The order of this run is written back, live tasks only. With a ``limit``, the run
stops at the first end time past it and returns that time, a lower bound on the
makespan; with a ``deadline`` (``time.monotonic()`` seconds) it raises TimeoutError
once the clock passes it. Either way the columns are left half written: the caller
restores them.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from array import array
from typing import Any, Protocol

try:
    from flextui.sim._ctaskstore import CTaskStore
except ImportError:  # built without a C compiler: the pure-Python store serves
    CTaskStore = None  # type: ignore[assignment,misc]

#: how many tasks a stage of the simulator handles between looks at the clock
CLOCK_EVERY = 4096


def check_deadline(deadline: float, what: str) -> None:
    """TimeoutError (``what`` ran past its deadline) once ``time.monotonic()`` has passed
    ``deadline``. The simulator's stages look every ``CLOCK_EVERY`` tasks, or between
    edges and parameters of a graph edit."""
    if deadline < math.inf and time.monotonic() > deadline:
        raise TimeoutError(f"{what} ran past its deadline")


#: what a task is to one run of the event loop (``reschedule``)
UNTOUCHED, WAITING, QUEUED, DONE = range(4)

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
    def reschedule(self, times_ready: array, times_start: array, times_end: array,
                   order: array, t0: float, changed: list[int], removed: list[int],
                   limit: float = ..., deadline: float = ...) -> float: ...


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

    def reschedule(self, times_ready: array, times_start: array, times_end: array,
                   order: array, t0: float, changed: list[int], removed: list[int],
                   limit: float = math.inf, deadline: float = math.inf) -> float:
        ready, start, end = times_ready, times_start, times_end
        preds, succs, resources, duration, key, alive = (self._preds, self._succs, self.resources,
                                                         self.duration, self.key, self._alive)
        for t in changed + removed:
            self._id(t)
        old = []
        for t in order:
            if t < 0:
                break
            old.append(self._id(t))
        free = [0.0] * self.num_resources
        state = [UNTOUCHED] * len(alive)
        fresh = [False] * len(alive)
        waiting = [0] * len(alive)
        heap: list[tuple[float, tuple, int]] = []
        out = []
        sweep = 0
        while sweep < len(old) and ready[old[sweep]] < t0:
            t = old[sweep]
            sweep += 1
            if alive[t]:
                state[t] = DONE
                out.append(t)
                for res in resources[t]:
                    if end[t] > free[res]:
                        free[res] = end[t]
        kept = len(out)

        def defer(u: int) -> None:
            left, r = 0, 0.0
            for p in preds[u]:
                if state[p] != DONE:
                    left += 1
                elif end[p] > r:
                    r = end[p]
            ready[u], waiting[u] = r, left
            state[u] = WAITING if left else QUEUED
            if not left:
                heapq.heappush(heap, (r, key[u], u))

        def freshen(u: int) -> None:
            if state[u] == DONE:
                raise RuntimeError(f"task {u} changed but is ready before t0")
            if state[u] == UNTOUCHED and alive[u]:
                fresh[u] = True
                defer(u)

        if not old:
            for t in range(len(alive)):
                freshen(t)
        for t in changed:
            freshen(t)
        for gone in removed:
            for u in succs[gone]:
                freshen(u)
        while True:
            if deadline < math.inf and (len(out) - kept) % CLOCK_EVERY == 0:
                check_deadline(deadline, "the simulation")
            while sweep < len(old) and (state[old[sweep]] != UNTOUCHED or not alive[old[sweep]]):
                sweep += 1
            t = -1
            if sweep < len(old):
                c = old[sweep]
                if not heap or (ready[c], key[c], c) < heap[0]:
                    sweep += 1
                    if any(state[p] != DONE for p in preds[c]):
                        defer(c)
                        continue
                    t, r = c, ready[c]
            if t < 0:
                if not heap:
                    break
                r, _, t = heapq.heappop(heap)
            s = r
            for res in resources[t]:
                if free[res] > s:
                    s = free[res]
            e = s + duration[t]
            if e > limit:
                return e
            for res in resources[t]:
                free[res] = e
            moved = fresh[t] or e != end[t]
            start[t], end[t] = s, e
            out.append(t)
            # t is done only after this loop: a successor deferred here waits for t
            # too, once per edge (edges may repeat), and is released below
            for u in succs[t]:
                if state[u] == UNTOUCHED:
                    if not moved:
                        continue
                    defer(u)
                if state[u] != WAITING:
                    raise RuntimeError(f"task {u} follows re-simulated task {t} but is not "
                                       "re-simulated itself")
                if e > ready[u]:
                    ready[u] = e
                waiting[u] -= 1
                if not waiting[u]:
                    state[u] = QUEUED
                    heapq.heappush(heap, (ready[u], key[u], u))
            state[t] = DONE
        stuck = state.count(WAITING)
        if stuck:
            raise RuntimeError(f"task graph has a cycle through {stuck} tasks")
        order[:len(out)] = array("i", out)
        if len(out) < len(alive):
            order[len(out)] = -1
        return max(max(free, default=0.0), max((end[t] for t in out[kept:]), default=0.0))
