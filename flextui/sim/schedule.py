"""Scheduling a task graph (paper section 5.2).

Every compute device and every link runs one task at a time, in the order the tasks
become ready; ties in ready time are broken by the task key (see ``taskgraph``). A task
starts when it is ready (all predecessors done) and every resource it needs has
finished the tasks ahead of it; a gradient all-reduce holds all the links of its ring.

``schedule`` simulates from scratch. ``reschedule`` re-simulates only what can have
changed after an edit whose tasks are all ready no earlier than ``t0``: tasks ready
before ``t0`` keep their times, and the rest are simulated again on resources whose
state at ``t0`` is taken from the kept tasks. Both give the same times, because a task
ready before ``t0`` depends only on tasks that end before ``t0`` and is queued on its
resources ahead of every task ready at ``t0`` or later.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from flextui.sim.taskgraph import TaskGraph


@dataclass
class Times:
    """Ready, start and end time of every task id (stale for dead ids)."""

    ready: list[float]
    start: list[float]
    end: list[float]

    def grow(self, n: int) -> None:
        extra = n - len(self.ready)
        if extra > 0:
            for column in (self.ready, self.start, self.end):
                column.extend([0.0] * extra)


def schedule(tg: TaskGraph) -> Times:
    n = len(tg)
    times = Times([0.0] * n, [0.0] * n, [0.0] * n)
    live = tg.live_ids()
    _run(tg, times, live, set(live), [0.0] * tg.num_resources)
    return times


def reschedule(tg: TaskGraph, times: Times, t0: float, changed: set[int]) -> float:
    """Re-simulate every live task that is in ``changed`` or was ready at ``t0`` or
    later; return the makespan."""
    times.grow(len(tg))
    ready, end, alive, resources = times.ready, times.end, tg.alive, tg.resources
    free = [0.0] * tg.num_resources
    redo = []
    for t in range(len(tg)):
        if not alive[t]:
            continue
        if ready[t] >= t0 or t in changed:
            redo.append(t)
        else:
            e = end[t]
            for r in resources[t]:
                if e > free[r]:
                    free[r] = e
    _run(tg, times, redo, set(redo), free)
    return max(max(free, default=0.0), max((end[t] for t in redo), default=0.0))


def _run(tg: TaskGraph, times: Times, tasks: list[int], todo: set[int], free: list[float]) -> None:
    """The event loop over ``tasks``; predecessors outside ``todo`` are already done."""
    ready, start, end = times.ready, times.start, times.end
    preds, succs, resources, duration, key = tg.preds, tg.succs, tg.resources, tg.duration, tg.key
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
        for u in succs[t]:
            if e > ready[u]:
                ready[u] = e
            left = waiting[u] - 1
            if left:
                waiting[u] = left
            else:
                del waiting[u]
                heapq.heappush(heap, (ready[u], key[u], u))
    if waiting:
        raise RuntimeError(f"task graph has a cycle through {len(waiting)} tasks")
