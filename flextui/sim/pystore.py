"""The pure-Python task store: the reference the C store (``csrc/``) is tested against,
and the store without a C compiler (see ``taskstore``).

A store holds, per task id, what a task is (kind, op, part, bytes, workspace, the device
that keeps its bytes), what the scheduler reads (duration, tie-break key: a tuple of at
most 8 ints, resource set, liveness, predecessors and successors), and the resource sets
(set ``r`` below ``num_resources`` is the single resource ``r``). Ids of removed tasks
are reused, the last freed first. Tasks are made one by one (``add``, for tests and
tools) or in bulk (``add_op``, ``add_edge``, ``add_param``: the task graph's rules, see
``taskgraph``), from arrays Python computes once per op and config.

``reschedule(ready, start, end, order, t0, changed, removed)`` re-simulates after an
edit, writing the columns in place, and returns the makespan. ``order`` (an
``array('i')``, a slot per task) holds the live tasks in the order the last run
simulated them, then -1 (or only -1: no last run, simulate every task). The tasks of
that order ready before ``t0`` keep their times (see ``schedule``); ``changed`` (added
tasks) and the live successors of ``removed`` ones are simulated afresh. Every other
task is re-timed only if a predecessor's end time changed (it is then queued on its
new ready time) or a task ahead of it on one of its resources changed (its start is
recomputed as it is passed): the loop walks the last order and merges in the queue,
so a task whose predecessors kept their end times keeps its place in the order without a
queue operation, and dead tasks are never visited but for the ones just removed.
The order of this run is written back, live tasks only. With a ``limit``, the run
stops at the first end time past it and returns that time, a lower bound on the
makespan; with a ``deadline`` (``time.monotonic()`` seconds) it raises TimeoutError
once the clock passes it; either way the columns are left half written. With
``journal``, the store keeps what the run overwrites (each re-timed task's times, the
order from the first slot it rewrites), and ``undo`` puts it back however the run
ended: a rejected proposal costs what it changed, not a copy of every task's times.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence

from flextui.sim import pyloop
from flextui.sim.pyloop import work_of

#: taskgraph.TaskKind's values, which the bulk builders make
FORWARD, BACKWARD, TRANSFER, SYNC, UPDATE, GATHER = range(6)

KEY_LEN = 8


class PyTaskStore:
    def __init__(self, num_resources: int) -> None:
        self.num_resources = num_resources
        self.rsets: list[tuple[int, ...]] = [(r,) for r in range(num_resources)]
        self.duration: list[float] = []
        self.key: list[tuple[int, ...]] = []
        self.rset: list[int] = []
        self.kind: list[int] = []
        self.op: list[int] = []
        self.part: list[int] = []
        self.nbytes: list[int] = []
        self.workspace: list[int] = []
        self.keeps: list[int] = []
        self._preds: list[list[int]] = []
        self._succs: list[list[int]] = []
        self._alive: list[bool] = []
        self._free: list[int] = []
        self._journal: tuple[list[tuple[int, float, float, float]], int, list[int]] | None = None
        #: per resource, the work of its live tasks (work_of each duration)
        self.work = [0] * num_resources

    def _add_work(self, t: int, sign: int) -> None:
        units = work_of(self.duration[t])
        for r in self.rsets[self.rset[t]]:
            self.work[r] += sign * units

    def __len__(self) -> int:
        return len(self._alive)

    # -- resource sets --------------------------------------------------------------

    def add_resource_set(self, resources: tuple[int, ...]) -> int:
        if any(not 0 <= r < self.num_resources for r in resources):
            raise IndexError(f"resource out of range in {resources}")
        self.rsets.append(tuple(resources))
        return len(self.rsets) - 1

    def resource_set(self, r: int) -> tuple[int, ...]:
        if not 0 <= r < len(self.rsets):
            raise IndexError(f"resource set {r} out of range")
        return self.rsets[r]

    # -- tasks ------------------------------------------------------------------------

    def _new(self, kind: int, op: int, part: int, rset: int, duration: float,
             key: tuple[int, ...], nbytes: int = 0, workspace: int = 0, keeps: int = -1) -> int:
        self._rset(rset)
        row: tuple = (float(duration), key, rset, kind, op, part, nbytes, workspace, keeps, [], [],
               True)
        columns: tuple[list, ...] = (self.duration, self.key, self.rset, self.kind, self.op,
                                     self.part, self.nbytes, self.workspace, self.keeps,
                                     self._preds, self._succs, self._alive)
        if self._free:
            t = self._free.pop()
            for column, value in zip(columns, row):
                column[t] = value
        else:
            for column, value in zip(columns, row):
                column.append(value)
            t = len(self._alive) - 1
        self._add_work(t, +1)
        return t

    def add(self, resources: tuple[int, ...], duration: float, key: tuple[int, ...]) -> int:
        if len(key) > KEY_LEN:
            raise ValueError("a task key has at most 8 ints")
        return self._new(FORWARD, -1, 0, self.add_resource_set(resources), duration, key)

    def _id(self, t: int) -> int:
        """``t``, if it names a task slot; IndexError otherwise (as the C store)."""
        if not 0 <= t < len(self._alive):
            raise IndexError(f"task id {t} out of range")
        return t

    def _device(self, d: int) -> int:
        if not 0 <= d < self.num_resources:
            raise IndexError(f"device {d} out of range")
        return d

    def _rset(self, r: int) -> int:
        if not 0 <= r < len(self.rsets):
            raise IndexError(f"resource set {r} out of range")
        return r

    def _ids(self, tasks: Sequence[int]) -> list[int]:
        return [self._id(t) for t in tasks]

    def link(self, a: int, b: int) -> None:
        self._id(a)
        self._id(b)
        self._succs[a].append(b)
        self._preds[b].append(a)

    def remove(self, tasks: Sequence[int]) -> None:
        """Delete ``tasks`` and their edges, freeing their ids, in the order given."""
        for t in self._ids(tasks):
            if self._alive[t]:
                self._add_work(t, -1)
            for p in self._preds[t]:
                self._succs[p].remove(t)
            for s in self._succs[t]:
                self._preds[s].remove(t)
            self._preds[t], self._succs[t], self._alive[t] = [], [], False
            self._free.append(t)

    def detach(self, tasks: Sequence[int]) -> None:
        """Unhook ``tasks`` from the tasks outside them, keeping their own edge lists."""
        gone = set(self._ids(tasks))
        for t in tasks:
            for p in self._preds[t]:
                if p not in gone:
                    self._succs[p].remove(t)
            for s in self._succs[t]:
                if s not in gone:
                    self._preds[s].remove(t)
            if self._alive[t]:
                self._add_work(t, -1)
            self._alive[t] = False

    def attach(self, tasks: Sequence[int]) -> None:
        """Undo ``detach``."""
        back = set(self._ids(tasks))
        for t in tasks:
            for p in self._preds[t]:
                if p not in back:
                    self._succs[p].append(t)
            for s in self._succs[t]:
                if s not in back:
                    self._preds[s].append(t)
            if not self._alive[t]:
                self._add_work(t, +1)
            self._alive[t] = True

    def release(self, tasks: Sequence[int]) -> None:
        """Free detached tasks for good."""
        for t in self._ids(tasks):
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

    def keys(self, tasks: Sequence[int]) -> list[tuple[int, ...]]:
        return [self.key[t] for t in self._ids(tasks)]

    def info(self, t: int) -> tuple[int, int, int, int, int, int, int]:
        """(kind, op, part, resource set, nbytes, workspace, keeps) of task ``t``."""
        t = self._id(t)
        return (self.kind[t], self.op[t], self.part[t], self.rset[t], self.nbytes[t],
                self.workspace[t], self.keeps[t])

    def live_ids(self) -> array:
        return array("i", [t for t, alive in enumerate(self._alive) if alive])

    def resource_sets(self) -> list[tuple[int, ...]]:
        return list(self.rsets)

    def columns(self) -> tuple[array, array, array, array, array, array, list | array]:
        """(ids, kind, op, part, resource set, nbytes, keys) of the live tasks, by id
        (keys: a list of tuples; the C store may give them packed, see ``timeline``)."""
        ids = self.live_ids()
        return (ids, array("B", [self.kind[t] for t in ids]), array("i", [self.op[t] for t in ids]),
                array("i", [self.part[t] for t in ids]), array("i", [self.rset[t] for t in ids]),
                array("q", [self.nbytes[t] for t in ids]), [self.key[t] for t in ids])

    def account(self, tasks: Sequence[int], sign: int, activations: array,
                ) -> list[tuple[int, int, int]]:
        """Add ``sign`` x the bytes each task keeps to ``activations[its device]``; return
        (device, workspace, count x sign) for the tasks that keep bytes and have a
        workspace, sorted."""
        spaces: Counter[tuple[int, int]] = Counter()
        for t in self._ids(tasks):
            d = self.keeps[t]
            if d < 0:
                continue
            if d >= len(activations):
                raise IndexError(f"device {d} out of range of activations")
            activations[d] += sign * self.nbytes[t]
            if self.workspace[t]:
                spaces[(d, self.workspace[t])] += 1
        return [(d, w, sign * c) for (d, w), c in sorted(spaces.items())]

    def resource_usage(self, start: array, end: array, num_devices: int) -> tuple[array, array]:
        """Per resource, the time live tasks hold it and the bytes transfers and syncs
        move over it (a device's busy time is its compute)."""
        busy = array("d", bytes(8 * self.num_resources))
        moved = array("q", bytes(8 * self.num_resources))
        for t, alive in enumerate(self._alive):
            if not alive:
                continue
            moving = self.kind[t] in (TRANSFER, SYNC, GATHER)
            for r in self.rsets[self.rset[t]]:
                if moving:
                    moved[r] += self.nbytes[t]
                    if r < num_devices:
                        continue
                busy[r] += end[t] - start[t]
        return busy, moved

    # -- bulk construction (see taskgraph) ------------------------------------------

    def add_op(self, op: int, devices: array, forward: array, backward: array | None,
               kept: int, workspace: int, shift: int = 0, keeping: bool = True,
               ) -> tuple[array, array]:
        """Per task ``k``: a forward task on ``devices[k]`` keeping ``kept`` bytes (none,
        and no input either, unless ``keeping``), and (``backward`` given) a backward
        task after it; ``shift`` is added to the op's place in the keys (a
        micro-batch's)."""
        if len(forward) != len(devices) or (backward is not None and
                                            len(backward) != len(devices)):
            raise ValueError("add_op: devices, forward and backward differ in length")
        fwd, bwd = array("i"), array("i")
        for d in devices:   # checked first: nothing is made unless all is well
            self._device(d)
        for k, d in enumerate(devices):
            f = self._new(FORWARD, op, k, d, forward[k], (0, op + shift, 1, k), kept, workspace,
                          d if keeping else -1)
            fwd.append(f)
            if backward is not None:
                b = self._new(BACKWARD, op, k, d, backward[k], (1, shift - op, 1, k))
                self.link(f, b)
                bwd.append(b)
        return fwd, bwd

    def _connect(self, a: int, b: int, hops: range, rsets: array, durations: array,
                 kind_op_part: tuple[int, int, int], nbytes: int, key: tuple[int, ...],
                 keeps_last: int, made: array) -> None:
        prev = a
        if not hops:
            self.link(a, b)
            return
        kind, op, part = kind_op_part
        for h in hops:
            keeps = keeps_last if h == hops[-1] else -1
            t = self._new(kind, op, part, rsets[h], durations[h], key + (h - hops[0],), nbytes,
                          keeps=keeps)
            self.link(prev, t)
            made.append(t)
            prev = t
        self.link(prev, b)

    def add_edge(self, producer: int, consumer: int, pfwd: array, cfwd: array, pbwd: array,
                 cbwd: array, slot: array, k: array, m: array, nbytes: array, fhops: array,
                 frsets: array, fdurations: array, bhops: array, brsets: array,
                 bdurations: array, shift: int = 0) -> array:
        """Per overlap ``i``: the forward chain ``pfwd[m[i]] -> cfwd[k[i]]`` over hops
        ``fhops[i]..fhops[i+1]``, and with ``pbwd`` not empty the gradient's chain
        ``cbwd[k[i]] -> pbwd[m[i]]`` over ``bhops``; returns the transfers made
        (``shift`` as ``add_op``'s)."""
        pairs, backward = len(slot), len(pbwd) > 0
        if len(k) != pairs or len(m) != pairs or len(nbytes) != pairs or \
                len(fhops) != pairs + 1 or (backward and len(bhops) != pairs + 1):
            raise ValueError("add_edge: the plan's arrays differ in length")
        for r in list(frsets) + list(brsets):   # checked first: nothing is made unless
            self._rset(r)                       # all is well
        for i in range(pairs):
            for tasks, j in ((pfwd, m[i]), (cfwd, k[i])) + (((pbwd, m[i]), (cbwd, k[i]))
                                                             if backward else ()):
                if not 0 <= j < len(tasks):
                    raise IndexError(f"add_edge: task {j} out of range")
                self._id(tasks[j])
            for hops, rsets, durations in ((fhops, frsets, fdurations),) + (
                    ((bhops, brsets, bdurations),) if backward else ()):
                if not 0 <= hops[i] <= hops[i + 1] <= min(len(rsets), len(durations)):
                    raise ValueError("add_edge: hops out of range")
        made = array("i")
        for i in range(pairs):
            s, ki, mi, n = slot[i], k[i], m[i], nbytes[i]
            pf, cf = pfwd[mi], cfwd[ki]
            keeps = self.keeps[cf] if self.kind[cf] == FORWARD else -1
            self._connect(pf, cf, range(fhops[i], fhops[i + 1]), frsets, fdurations,
                          (TRANSFER, consumer, ki), n, (0, consumer + shift, 0, ki, s, mi), keeps,
                          made)
            if backward:
                self._connect(cbwd[ki], pbwd[mi],
                              range(bhops[i], bhops[i + 1]), brsets, bdurations,
                              (TRANSFER, producer, mi), n,
                              (1, shift - producer, 0, mi, consumer, s, ki), -1, made)
        return made

    def add_param(self, order: int, producers: array, gdevs: array, gdevices: array,
                  gblocks: array, gblockids: array, grsets: array, gdurations: array,
                  gnbytes: array, udevices: array, udurations: array, unbytes: array) -> array:
        """Per replica group ``g`` (devices ``gdevices[gdevs[g]..gdevs[g+1]]``, gradients
        from ``producers[b]`` for the blocks ``gblockids[gblocks[g]..gblocks[g+1]]``) held
        by more than one device, an all-reduce after its producers; then per device
        ``udevices[j]`` an update after the single-device groups' producers and the
        all-reduces of the groups it is in, each once, in group order."""
        groups = len(gdevs) - 1
        if groups < 0 or len(gblocks) != groups + 1 or len(grsets) != groups or \
                len(gdurations) != groups or len(gnbytes) != groups or \
                len(udurations) != len(udevices) or len(unbytes) != len(udevices):
            raise ValueError("add_param: the plan's arrays differ in length")
        for b in gblockids:   # checked first: nothing is made unless all is well
            if not 0 <= b < len(producers):
                raise IndexError(f"add_param: block {b} out of range")
            self._id(producers[b])
        for d in list(gdevices) + list(udevices):
            self._device(d)
        for g in range(groups):
            if gdevs[g + 1] - gdevs[g] != 1:
                self._rset(grsets[g])
            if gdevs[g + 1] < gdevs[g] or gblocks[g + 1] < gblocks[g]:
                raise ValueError("add_param: the plan's offsets go backwards")
        made = array("i")
        ready_on: dict[int, list[int]] = {}
        for g in range(groups):
            tasks = sorted({producers[b] for b in gblockids[gblocks[g]:gblocks[g + 1]]})
            devices = gdevices[gdevs[g]:gdevs[g + 1]]
            if len(devices) == 1:
                ready_on.setdefault(devices[0], []).extend(tasks)
                continue
            sync = self._new(SYNC, -1, g, grsets[g], gdurations[g], (2, order, g), gnbytes[g])
            made.append(sync)
            for t in tasks:
                self.link(t, sync)
            for d in devices:
                ready_on.setdefault(d, []).append(sync)
        for j, d in enumerate(udevices):
            update = self._new(UPDATE, -1, d, d, udurations[j], (3, order, d), unbytes[j])
            made.append(update)
            for t in dict.fromkeys(ready_on[d]):
                self.link(t, update)
        return made

    def add_gather(self, op: int, part: int, rset: int, duration: float, nbytes: int,
                   key: tuple[int, ...], preds: Sequence[int], succs: Sequence[int]) -> int:
        """An all-gather of a parameter's replica group (stage 3) before op ``op``'s
        tasks ``succs``, after ``preds``, holding ``rset`` and moving ``nbytes``."""
        if len(key) > KEY_LEN:
            raise ValueError("a task key has at most 8 ints")
        self._rset(rset)
        self._ids(preds)
        self._ids(succs)
        t = self._new(GATHER, op, part, rset, duration, key, nbytes)
        for p in preds:
            self.link(p, t)
        for s in succs:
            self.link(t, s)
        return t

    # -- the event loop ---------------------------------------------------------------

    def earliest_ready(self, ready: array, end: array, added: Sequence[int],
                       removed: Sequence[int]) -> float:
        """The earliest ready time of a removed task, or lower bound on an added one's:
        the latest end of its predecessors from before the edit (0 with none)."""
        new = set(self._ids(added))
        t0 = min((ready[t] for t in self._ids(removed)), default=math.inf)
        for t in added:
            preds = self._preds[t]
            known = [end[p] for p in preds if p not in new]
            if known or not preds:
                t0 = min(t0, max(known, default=0.0))
        return t0

    def undo(self, ready: array, start: array, end: array, order: array) -> None:
        """Put back what the last journaled ``reschedule`` wrote."""
        if self._journal is None:
            raise RuntimeError("no journaled reschedule to undo")
        saved, start_at, old = self._journal
        for t, r, s, e in reversed(saved):   # the first saved wins
            ready[t], start[t], end[t] = r, s, e
        order[start_at:start_at + len(old)] = array("i", old)
        if start_at + len(old) < len(order):
            order[start_at + len(old)] = -1
        self._journal = None

    def forget(self) -> None:
        self._journal = None

    def trim(self) -> None:
        """Give back spare slots (Python's lists hold none worth giving back)."""

    def reschedule(self, ready: array, start: array, end: array, order: array, t0: float,
                   changed: Sequence[int], removed: Sequence[int], limit: float = math.inf,
                   deadline: float = math.inf, journal: bool = False) -> float:
        return pyloop.reschedule(self, ready, start, end, order, t0, changed, removed, limit,
                                 deadline, journal)
