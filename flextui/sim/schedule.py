"""Scheduling a task graph (paper section 5.2).

Every compute device and every link runs one task at a time, in the order the tasks
become ready; ties in ready time are broken by the task key (see ``taskgraph``). A task
starts when it is ready (all predecessors done) and every resource it needs has
finished the tasks ahead of it; a gradient all-reduce holds all the links of its ring.

``schedule`` simulates from scratch. ``reschedule`` re-simulates only what can have
changed after an edit whose tasks are all ready no earlier than ``t0``: tasks ready
before ``t0`` keep their times, and of the rest only those whose predecessors or
resource queues changed are re-timed, on resources whose state at ``t0`` is taken
from the kept tasks. Both give the same times, because a task
ready before ``t0`` depends only on tasks that end before ``t0`` and is queued on its
resources ahead of every task ready at ``t0`` or later.

The event loop itself belongs to the task graph's store (``taskstore``): in C, or the
pure-Python reference; so does the journal that undoes a run.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from flextui.sim.taskgraph import TaskGraph


@dataclass
class Times:
    """Ready, start and end time of every task id (stale for dead ids), as arrays of
    doubles the C loop writes in place, and the order it simulated the live tasks in
    (ids, then -1; see ``taskstore``)."""

    ready: array
    start: array
    end: array
    order: array

    @classmethod
    def zeros(cls, n: int) -> Times:
        return cls(array("d", bytes(8 * n)), array("d", bytes(8 * n)), array("d", bytes(8 * n)),
                   array("i", [-1]) * n)

    def grow(self, n: int) -> None:
        extra = n - len(self.ready)
        if extra > 0:
            for column in (self.ready, self.start, self.end):
                column.frombytes(bytes(8 * extra))
            self.order.extend(array("i", [-1]) * extra)


def schedule(tg: TaskGraph) -> Times:
    times = Times.zeros(len(tg))
    reschedule(tg, times, -float("inf"), [], [])
    return times


def reschedule(tg: TaskGraph, times: Times, t0: float, changed: Sequence[int],
               removed: Sequence[int], limit: float = math.inf, deadline: float = math.inf,
               journal: bool = False) -> float:
    """Re-simulate after adding the tasks ``changed`` and removing ``removed``, all
    ready no earlier than ``t0``: the tasks ready before ``t0`` keep their times, the
    others are re-timed where a predecessor or a task ahead of them on a resource
    changed (see ``taskstore``); return the makespan. A result past ``limit`` is only a
    lower bound on it: the run stopped there, leaving ``times`` half written, as a
    TimeoutError does once ``time.monotonic()`` passes ``deadline``. With ``journal``,
    ``undo`` puts ``times`` back as they were, however the run ended."""
    times.grow(len(tg))
    return tg.store.reschedule(times.ready, times.start, times.end, times.order, t0, changed,
                               removed, limit, deadline, journal)


def undo(tg: TaskGraph, times: Times) -> None:
    """``times`` as they were before the last journaled ``reschedule``."""
    tg.store.undo(times.ready, times.start, times.end, times.order)
