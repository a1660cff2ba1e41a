"""The pure-Python store's event loop (``PyTaskStore.reschedule``; ``pystore`` says
what it does), and the work units early rejection's bound counts in, which the store
keeps per resource."""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flextui.sim.deadline import CLOCK_EVERY, check_deadline

if TYPE_CHECKING:
    from flextui.sim.pystore import PyTaskStore

#: what a task is to one run of the event loop (``reschedule``)
UNTOUCHED, WAITING, QUEUED, DONE = range(4)

#: early rejection's bound counts work in these seconds (csrc/store.h: WORK_UNIT); a
#: run stops once a bound passes its limit by BOUND_MARGIN of it and returns the bound
#: less BOUND_SHAVE of itself (csrc/loop.c)
WORK_UNIT, BOUND_MARGIN, BOUND_SHAVE = 1e-12, 4e-15, 1e-15


def work_of(seconds: float) -> int:
    """A duration as whole work units, rounded down (never more than it is)."""
    units = int(seconds * 1e12) - 1 if seconds > 0 else 0
    return max(units, 0)



def reschedule(store: PyTaskStore, ready: array, start: array, end: array, order: array, t0: float,
                changed: Sequence[int], removed: Sequence[int], limit: float = math.inf,
                deadline: float = math.inf, journal: bool = False) -> float:
    """``PyTaskStore.reschedule`` (see ``pystore``'s docstring)."""
    preds, succs, duration, key, alive = (store._preds, store._succs, store.duration,
                                          store.key, store._alive)
    resources = [store.rsets[r] for r in store.rset]
    store._journal = None
    changed, removed = store._ids(changed), store._ids(removed)
    old = []
    for t in order:
        if t < 0:
            break
        old.append(store._id(t))
    free = [0.0] * store.num_resources
    done = [0] * store.num_resources   # work of the tasks run so far, per resource
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
            units = work_of(duration[t])
            for res in resources[t]:
                if end[t] > free[res]:
                    free[res] = end[t]
                done[res] += units
    kept = len(out)
    saved: list[tuple[int, float, float, float]] = []
    if journal:
        start_at = kept if kept == sweep else 0
        store._journal = (saved, start_at, old[start_at:])

    def save(u: int) -> None:
        if journal:
            saved.append((u, ready[u], start[u], end[u]))

    def defer(u: int) -> None:
        save(u)
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
                save(c)
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
        units = work_of(duration[t])
        for res in resources[t]:
            free[res] = e
            done[res] += units
            # free at e, with at least the work left on it still to run
            if limit < math.inf:
                bound = e + (store.work[res] - done[res]) * WORK_UNIT
                if bound > limit + BOUND_MARGIN * abs(limit):
                    return bound - BOUND_SHAVE * bound
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
