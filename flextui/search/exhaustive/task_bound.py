"""The task-level part of the exhaustive search's lower bound (see ``exhaustive`` for
the whole bound and why each part holds).

It works on the *certain* tasks of a partial assignment, those every completion has
alike: the tasks of the assigned ops, the transfers between assigned ops, and the
all-reduces and updates of parameters whose users are all assigned. Their durations,
resources and dependencies are the same in every completion, so a schedule of a
completion, cut down to them, is a schedule of this smaller task graph.

Every certain task gets a head (a lower bound on its start) and a tail (on the time
from its end to the end of the iteration), seeded from the op-level tables ``E``,
``B``, ``R`` (which account for the unassigned ops) and raised along the dependencies
and by one-device reasoning over a task's ancestors (for heads) or descendants (for
tails). The bound is the largest of head + duration + tail, of the one-resource bounds
over each device's and link's tasks, and of the compute over the device count.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from flextui.search.exhaustive.schedule_bound import (
    cannot_finish_before,
    one_resource,
    raise_bounds,
    topological,
)
from flextui.sim.overlaps import block_overlaps

if TYPE_CHECKING:
    from flextui.search.exhaustive.tables import BoundTables

INF = math.inf


class Tasks:
    """Certain tasks as parallel lists: duration, resources (devices ``0..D-1``, link
    ``l`` as ``D + l``), predecessors, and for an op's task (op, task index, backward)."""

    def __init__(self) -> None:
        self.dur: list[float] = []
        self.res: list[tuple[int, ...]] = []
        self.preds: list[list[int]] = []
        self.op_task: list[tuple[int, int, bool] | None] = []

    def add(self, res: tuple[int, ...], dur: float, preds: list[int],
            op_task: tuple[int, int, bool] | None = None) -> int:
        self.dur.append(dur)
        self.res.append(res)
        self.preds.append(preds)
        self.op_task.append(op_task)
        return len(self.dur) - 1

    def chain(self, src: int, dst: int, hops: tuple) -> None:
        """``dst`` needs data made by ``src``: directly, or through transfer ``hops``."""
        prev = src
        for res, dur in hops:
            prev = self.add((res,), dur, [prev])
        self.preds[dst].append(prev)


class TaskBound:
    def __init__(self, tables: BoundTables) -> None:
        self.t = tables
        self._chains: dict[tuple[int, int, int, int], list | None] = {}

    def bound(self, a: list[int], E: list, B: list | None, R: list | None,
              target: float = INF) -> float:
        """A lower bound on the makespan of every completion of ``a`` (config index per
        op, -1 for unassigned), given the op-level tables of ``a``; inf if some
        transfer or all-reduce the assigned ops need has no route. When it is below
        ``target`` and ``cannot_finish_before`` proves that no completion ends before
        ``target``, ``target``."""
        t, D = self.t, self.t.D
        g = self.tasks(a)
        if g is None:
            return INF
        head, tail = self._seeds(g, a, E, B, R)
        succs: list[list[int]] = [[] for _ in g.dur]
        for x, ps in enumerate(g.preds):
            for p in ps:
                succs[p].append(x)
        order = topological(g.preds, succs)
        raise_bounds(order, g.preds, g.dur, g.res, head, D)
        raise_bounds(order[::-1], succs, g.dur, g.res, tail, D)
        best = max((h + d + q for h, d, q in zip(head, g.dur, tail)), default=0.0)
        per_resource: list[list[tuple[float, float, float]]] = [[] for _ in range(D + t.L)]
        for x, rs in enumerate(g.res):
            for r in rs:
                per_resource[r].append((head[x], g.dur[x], tail[x]))
        for items in per_resource:
            if items:
                best = max(best, one_resource(items))
        work = sum(d for d, rs in zip(g.dur, g.res) if rs and rs[0] < D)
        spare = sum(t.min_work[i] for i, c in enumerate(a) if c < 0)
        best = max(best, (work + spare) / D)
        if best < target < INF and cannot_finish_before(target, g.dur, g.res, g.preds, head, tail,
                                                        D, D + t.L):
            return target
        return best

    def _seeds(self, g: Tasks, a: list[int], E: list, B: list | None,
               R: list | None) -> tuple[list[float], list[float]]:
        """Heads and tails of the ops' tasks from the op-level tables (``E``/``B``
        bound ends, ``R`` what follows a backward task); zero for the rest."""
        t = self.t
        head, tail = [0.0] * len(g.dur), [0.0] * len(g.dur)
        for x, ot in enumerate(g.op_task):
            if ot is None:
                continue
            v, k, backward = ot
            if backward:  # (B and R are None only without training: no backward task)
                assert B is not None and R is not None
                head[x] = B[v][0, k] - g.dur[x]
                tail[x] = R[v][0, k]
            else:
                head[x] = E[v][0, k] - g.dur[x]
                if t.has_bwd[v]:
                    assert R is not None
                    tail[x] = t.dB[v][a[v], k] + R[v][0, k]
        return head, tail

    # -- the certain tasks -------------------------------------------------------------

    def tasks(self, a: list[int]) -> Tasks | None:
        """The certain tasks of ``a`` (None if one needs a route the cluster lacks)."""
        t, g = self.t, Tasks()
        fwd, bwd = {}, {}
        for v, c in enumerate(a):
            if c < 0:
                continue
            for k, d in enumerate(t.configs[v][c].devices):
                fwd[v, k] = g.add((d,), float(t.dF[v][c, k]), [], (v, k, False))
                if t.has_bwd[v]:
                    bwd[v, k] = g.add((d,), float(t.dB[v][c, k]), [fwd[v, k]], (v, k, True))
        for p, v in t.edges:
            if a[p] < 0 or a[v] < 0:
                continue
            chains = self.chains(p, v, a[p], a[v])
            if chains is None:
                return None
            for m, k, f, b in chains:
                g.chain(fwd[p, m], fwd[v, k], f)
                if t.has_bwd[p]:
                    g.chain(bwd[v, k], bwd[p, m], b)
        if t.training:
            for name, users in t.param_users.items():
                cs = tuple(a[i] for i in users)
                if min(cs) >= 0 and not self._param_tasks(g, name, cs, bwd):
                    return None
        return g

    def chains(self, p: int, v: int, cp: int, cv: int) -> list | None:
        """Per overlap of a block op ``v`` reads (config ``cv``) with one op ``p``
        makes (config ``cp``): (producer task, consumer task, forward hops, gradient
        hops), a hop being (resource, duration), none on one device. None if a
        transfer has no route."""
        key = (p, v, cp, cv)
        if key not in self._chains:
            self._chains[key] = self._make_chains(p, v, cp, cv)
        return self._chains[key]

    def _make_chains(self, p: int, v: int, cp: int, cv: int) -> list | None:
        t = self.t
        producer, consumer = t.ops[p], t.ops[v]
        pc, cc = t.configs[p][cp], t.configs[v][cv]
        out = []
        for _, k, m, nbytes in block_overlaps(producer, consumer, pc, cc):
            src, dst = pc.devices[m], cc.devices[k]
            f = self._hops(src, dst, nbytes)
            b = self._hops(dst, src, nbytes) if t.has_bwd[p] else ()
            if f is None or b is None:
                return None
            out.append((m, k, f, b))
        return out

    def _hops(self, src: int, dst: int, nbytes: int) -> tuple | None:
        if src == dst:
            return ()
        hops = self.t.hops(src, dst, nbytes)
        return None if hops is None else tuple((self.t.D + lid, dur) for lid, dur in hops)

    def _param_tasks(self, g: Tasks, name: str, cs: tuple[int, ...], bwd: dict) -> bool:
        """A parameter's all-reduce per replica group on several devices (after the
        group's backward tasks) and its update on each device (after the all-reduces
        of the groups there, or their backward tasks); False if a ring has no route."""
        out = self.t.param_outcome(name, cs)
        ready_on: dict[int, list[int]] = {}
        for sync, links, devices, members in out.groups:
            grads = [bwd[i, k] for i, k in members]
            if len(devices) == 1:
                ready_on.setdefault(devices[0], []).extend(grads)
                continue
            if sync == INF:
                return False
            s = g.add(tuple(self.t.D + lid for lid in links), sync, grads)
            for d in devices:
                ready_on.setdefault(d, []).append(s)
        for d in range(self.t.D):
            if out.shard[d]:
                g.add((d,), float(out.updates[d]), list(dict.fromkeys(ready_on[d])))
        return True
