"""Lower bounds on the schedules of a task graph: any schedule that respects the
dependencies, starts no task before its *head* (a lower bound on its start), follows
each task by at least its *tail* (a lower bound on the time from its end to the end),
and runs one task at a time on each resource. ``task_bound`` applies them to the tasks
every completion of a partial assignment shares.

``raise_bounds`` raises heads (or tails) along the dependencies and by one-device
reasoning over a task's ancestors (descendants); ``one_resource`` bounds the end from
one resource's tasks; ``cannot_finish_before`` proves that no schedule ends before a
target time, by the disjunctive reasoning of job-shop branch and bound:

Suppose some schedule ends before ``target``. Two tasks that share a resource and
neither of which depends on the other run one after the other; if ``A`` before ``B``
would make the schedule end at or after ``target`` (head A + duration A + duration B +
tail B >= target), then in that schedule ``B`` runs before ``A``: a new dependency.
With it, heads and tails rise, which may force more orders. If a pair can go neither
way, if the dependencies form a cycle, or if a task's head + duration + tail, or a
resource's one-resource bound, reaches ``target``, the supposed schedule cannot exist.
Every step only derives what such a schedule must satisfy.
"""

from __future__ import annotations

import math

import numpy as np

INF = math.inf
ROUNDS = 6


def topological(preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    waiting = [len(ps) for ps in preds]
    order = [x for x, w in enumerate(waiting) if not w]
    for x in order:  # grows while it is walked
        for u in succs[x]:
            waiting[u] -= 1
            if not waiting[u]:
                order.append(u)
    return order


def raise_bounds(order: list[int], before: list[list[int]], dur: list[float],
                 res: list[tuple[int, ...]], bound: list[float], devices: int) -> None:
    """Raise heads in place (``order`` topological, ``before`` the predecessors) or,
    with the reverse order and the successors, tails: a task starts after each
    predecessor ends, and after all its ancestors on each device (resources
    ``0..devices-1``) end, which run there one at a time, none before its head: for
    every h, after h + the durations of those with a head of at least h
    (``_release_bound``). Each task is raised once, after all its ancestors, from their
    final values. (The rule holds on links too; devices give nearly all its worth.)

    A set of ancestors that is exactly one predecessor's (itself and its ancestors)
    adds nothing: that predecessor starts after its own ancestors there end and ends
    after itself, so the set's bound is at most the predecessor's head + duration.
    The bound of a set depends only on the set (its members' values are final), so it
    is computed once a call."""
    on_device = [len(rs) == 1 and rs[0] < devices for rs in res]
    closed = [0] * len(dur)   # bit set of the device tasks among each task and its ancestors
    on: list[int] = [0] * devices  # bit set of each device's tasks
    for x, rs in enumerate(res):
        if on_device[x]:
            on[rs[0]] |= 1 << x
    known: dict[int, float] = {}
    for x in order:
        b, mask = bound[x], 0
        for p in before[x]:
            b = max(b, bound[p] + dur[p])
            mask |= closed[p]
        closed[x] = mask | (1 << x) if on_device[x] else mask
        if len(before[x]) > 1:  # else every set is its one predecessor's
            for d in range(devices):
                s = mask & on[d]
                if not s & (s - 1):
                    continue  # one task alone is on a dependency path
                for p in before[x]:
                    if closed[p] & on[d] == s:
                        break  # one predecessor's set: already in its bound
                else:
                    if s not in known:
                        known[s] = _release_bound(s, bound, dur)
                    b = max(b, known[s])
        bound[x] = b


def _release_bound(mask: int, bound: list[float], dur: list[float]) -> float:
    """The least time by which the tasks in ``mask`` can all have run one at a time,
    none before its ``tables``: max over h of h + the durations of those with bound >= h."""
    members = []
    while mask:
        low = mask & -mask
        members.append(low.bit_length() - 1)
        mask ^= low
    members.sort(key=bound.__getitem__, reverse=True)
    total, best = 0.0, -INF
    for y in members:
        total += dur[y]
        best = max(best, bound[y] + total)
    return best


def one_resource(items: list[tuple[float, float, float]]) -> float:
    """Items (head, duration, tail) run one at a time: for any subset, the makespan is
    at least its least head + its durations + its least tail. The subsets of items
    with a head of at least h, then those with a tail of at least q."""
    best = 0.0
    for pos, lead, trail in ((0, 0, 2), (2, 2, 0)):
        items.sort(key=lambda item: -item[pos])
        total, least = 0.0, INF
        for item in items:
            total += item[1]
            least = min(least, item[trail])
            best = max(best, item[lead] + total + least)
    return best




def cannot_finish_before(target: float, dur: list[float], res: list[tuple[int, ...]],
                         preds: list[list[int]], head: list[float], tail: list[float],
                         num_devices: int, num_resources: int) -> bool:
    """True if no schedule of the tasks (durations ``dur``, resources ``res``,
    predecessors ``preds``) with every task starting at or after its ``head`` and
    followed by at least its ``tail`` ends before ``target``. ``head`` and ``tail``
    are raised in place."""
    n = len(dur)
    preds = [list(ps) for ps in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for x, ps in enumerate(preds):
        for p in ps:
            succs[p].append(x)
    users: list[list[int]] = [[] for _ in range(num_resources)]
    for x, rs in enumerate(res):
        for r in rs:
            users[r].append(x)
    members = [np.array(xs) for xs in users if len(xs) > 1]
    d = np.array(dur)
    order = topological(preds, succs)
    for _ in range(ROUNDS):
        forced = _forced_orders(target, d, np.array(head), np.array(tail),
                                _reachable(order, preds, n), members)
        if forced is None:
            return True
        if not forced:
            return False
        for first, then in forced:
            preds[then].append(first)
            succs[first].append(then)
        order = topological(preds, succs)
        if len(order) < n:
            return True   # a cycle of forced orders
        raise_bounds(order, preds, dur, res, head, num_devices)
        raise_bounds(order[::-1], succs, dur, res, tail, num_devices)
        if max(h + x + q for h, x, q in zip(head, dur, tail)) >= target:
            return True
        if any(one_resource([(head[x], dur[x], tail[x]) for x in xs]) >= target
               for xs in members):
            return True
    return False


def _reachable(order: list[int], preds: list[list[int]], n: int) -> np.ndarray:
    """reach[x, y]: ``y`` is an ancestor of ``x``."""
    reach = np.zeros((n, n), bool)
    for x in order:
        for p in preds[x]:
            reach[x] |= reach[p]
            reach[x, p] = True
    return reach


def _forced_orders(target: float, d: np.ndarray, head: np.ndarray, tail: np.ndarray,
                   reach: np.ndarray, members: list[np.ndarray]) -> list[tuple[int, int]] | None:
    """The (first, then) orders forced on unordered pairs sharing a resource; None if a
    pair can go neither way."""
    forced = []
    for xs in members:
        # impossible[i, j]: i before j ends at or after the target
        impossible = (head[xs] + d[xs])[:, None] + (d[xs] + tail[xs])[None, :] >= target
        sub = reach[np.ix_(xs, xs)]
        free = ~(sub | sub.T)
        np.fill_diagonal(free, False)
        impossible &= free
        if (impossible & impossible.T).any():
            return None
        for i, j in zip(*np.nonzero(impossible)):
            forced.append((int(xs[j]), int(xs[i])))
    return list(dict.fromkeys(forced))
