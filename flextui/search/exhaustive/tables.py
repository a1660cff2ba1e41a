"""The lower bound of exhaustive search: per-op tables of task, transfer, all-reduce
and update times for every config, and ``BoundTables.bound`` of a partial assignment
(critical paths, per-resource work, memory). Why it is valid: ``exhaustive``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flextui.cost.model import CostModel, checked_cost_model
from flextui.errors import ClusterError
from flextui.graph import OpGraph, intersect, region_volume
from flextui.graph.tensor import dtype_bytes
from flextui.machine import Cluster
from flextui.search.exhaustive.task_bound import TaskBound
from flextui.sim.buckets import cluster_bucket_limit
from flextui.sim.memory import PENALTY_S_PER_MB, MemoryPolicy
from flextui.sim.replicas import ParamBlock, replica_groups
from flextui.strategy import (
    ParallelConfig,
    valid_configs,
)

NEG = -1e300  # "no constraint": finite, so that inf + NEG is inf, not NaN


@dataclass
class _Edge:
    # Chain times, NEG where there is no dependency; the leading axis is the one the
    # bound maximises over (contiguous, so numpy reduces it fast).
    fwd: np.ndarray      # (m, cp, cv, k): producer task m's output to consumer task k
    grad: np.ndarray     # (m, cp, cv, k): the gradient from consumer task k back to m
    gradT: np.ndarray    # (k, cv, cp, m): the same, laid out for the producer's side
    links: np.ndarray    # (ncp, ncv, L): link busy time, forward and backward
    recv: np.ndarray     # (ncp, ncv, D): bytes received into forward tasks, per device


@dataclass
class _ParamOutcome:
    shard: np.ndarray            # (D,) bytes of the parameter on each device
    updates: np.ndarray          # (D,) optimizer update time per device
    syncs: np.ndarray            # (L,) all-reduce time per link
    tails: dict[int, np.ndarray] = field(default_factory=dict)  # op -> (D,) per task
    # per replica group: (all-reduce time or 0, its links, its devices, its (op, task)s)
    groups: list[tuple[float, tuple[int, ...], tuple[int, ...], list[tuple[int, int]]]] = \
        field(default_factory=list)


class BoundTables:
    """Everything the bound needs, per op config and per edge config pair."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 training: bool, memory: MemoryPolicy) -> None:
        self.graph, self.cluster = graph, cluster
        self.cost_model = checked_cost_model(cost_model)
        self.training, self.memory = training, memory
        self.ops = ops = graph.ops
        self.n = len(ops)
        assert all(op.index == i for i, op in enumerate(ops))
        self.D = D = cluster.num_devices
        self.L = len(cluster.links)
        assert all(link.id == i for i, link in enumerate(cluster.links))
        self.capacity = np.array([cluster.device(d).spec.memory_bytes for d in range(D)], float)
        self.has_bwd = [training and op.type != "input" for op in ops]
        self.preds = [[p.index for p in graph.predecessors(op)] for op in ops]
        self.succs = [[s.index for s in graph.successors(op)] for op in ops]
        self._transfer: dict[tuple[int, int], float] = {}

        self.configs: list[list[ParallelConfig]] = []
        self.dF: list[np.ndarray] = []
        self.dB: list[np.ndarray] = []
        self.load: list[np.ndarray] = []
        self.kept: list[np.ndarray] = []
        self.ws: list[np.ndarray] = []
        self.min_work: list[float] = []
        self.mask_off: list[np.ndarray] = []
        for op in ops:
            self._op_tables(op)

        # parameters: users, sole-user tails (per config), shared ones on demand
        self.param_users: dict[str, list[int]] = {}
        self.param_slots: dict[str, list[tuple[int, int]]] = {}
        for op in ops:
            for j, param in enumerate(op.params):
                self.param_slots.setdefault(param.name, []).append((op.index, j))
        for name, slots in self.param_slots.items():
            self.param_users[name] = list(dict.fromkeys(i for i, _ in slots))
        self.op_params = [list(dict.fromkeys(p.name for p in op.params)) for op in ops]
        self._param_cache: dict[tuple, _ParamOutcome] = {}
        self._shard_cache: dict[tuple, np.ndarray] = {}
        self.sole_tail = []
        for op in ops:
            tail = np.zeros((len(self.configs[op.index]), D))
            for name in self.op_params[op.index]:
                if self.training and self.param_users[name] == [op.index]:
                    for c in range(len(self.configs[op.index])):
                        out = self.param_outcome(name, (c,))
                        tail[c] = np.maximum(tail[c], out.tails[op.index])
            self.sole_tail.append(tail)

        self.edges: dict[tuple[int, int], _Edge] = {}
        for op in ops:
            for p in self.preds[op.index]:
                self.edges[(p, op.index)] = self._edge_tables(ops[p], op)
        self.task_bound = TaskBound(self)

    # -- building ------------------------------------------------------------------

    def _op_tables(self, op) -> None:
        D = self.D
        configs = list(valid_configs(op, D))
        nc = len(configs)
        dF, dB, load = np.zeros((nc, D)), np.zeros((nc, D)), np.zeros((nc, D))
        mask = np.zeros((nc, D), bool)
        kept, ws = np.zeros((nc, D)), np.zeros((nc, D))
        for c, config in enumerate(configs):
            shape = config.block_shape(op)
            nbytes = sum(region_volume(r) * dtype_bytes(t.dtype)
                         for r, t in zip(op.output_regions(config.task_region(op, 0)), op.outputs))
            for k, d in enumerate(config.devices):
                cost = self.cost_model.op_cost(op, shape, self.cluster.device(d))
                dF[c, k] = cost.forward_s
                dB[c, k] = cost.backward_s if self.has_bwd[op.index] else 0.0
                mask[c, k] = True
                load[c, d] += dF[c, k] + dB[c, k]
                kept[c, d] += nbytes
                ws[c, d] = max(ws[c, d], cost.workspace_bytes)
        order = sorted(range(nc), key=lambda c: (load[c].max(), load[c].sum(), c))
        self.configs.append([configs[c] for c in order])
        for table, values in ((self.dF, dF), (self.dB, dB),
                              (self.load, load), (self.kept, kept), (self.ws, ws)):
            table.append(values[order])
        self.min_work.append(float(load.sum(axis=1).min()))
        mask = mask[order]
        self.mask_off.append(np.where(mask, 0.0, NEG))   # 0 for a task, NEG for none

    def hops(self, src: int, dst: int, nbytes: int) -> list[tuple[int, float]] | None:
        """(link id, transfer time) of each hop from ``src`` to ``dst``; None if the
        cluster has no route (the simulator cannot simulate that: never a leaf)."""
        try:
            route = self.cluster.route(src, dst)
        except ClusterError:
            return None
        hops = []
        for link in route:
            key = (nbytes, link.id)
            t = self._transfer.get(key)
            if t is None:
                t = self._transfer[key] = self.cost_model.transfer_s(nbytes, link)
            hops.append((link.id, t))
        return hops

    def _edge_tables(self, producer, consumer) -> _Edge:
        D, L = self.D, self.L
        pcs, ccs = self.configs[producer.index], self.configs[consumer.index]
        fwd = np.full((len(pcs), len(ccs), D, D), NEG)
        bwd = np.full((len(pcs), len(ccs), D, D), NEG)
        links = np.zeros((len(pcs), len(ccs), L))
        recv = np.zeros((len(pcs), len(ccs), D))
        backward = self.has_bwd[producer.index]
        outs = [[producer.output_regions(r) for r in pc.regions(producer)] for pc in pcs]
        ins = [[consumer.input_regions(r) for r in cc.regions(consumer)] for cc in ccs]
        slots = [(s, t) for s, t in enumerate(consumer.inputs) if t.producer is producer]
        for (a, pc), (b, cc) in itertools.product(enumerate(pcs), enumerate(ccs)):
            for slot, tensor in slots:
                width = dtype_bytes(tensor.dtype)
                for k, needs in enumerate(ins[b]):
                    for m, out in enumerate(outs[a]):
                        overlap = intersect(needs[slot], out[tensor.index])
                        if overlap is None:
                            continue
                        src, dst = pc.devices[m], cc.devices[k]
                        f = g = 0.0
                        if src != dst:
                            nbytes = region_volume(overlap) * width
                            recv[a, b, dst] += nbytes
                            pairs = ((src, dst), (dst, src))[:1 + backward]
                            for direction, (x, y) in enumerate(pairs):
                                hops = self.hops(x, y, nbytes)
                                if hops is None:
                                    total = math.inf
                                    links[a, b] = math.inf
                                else:
                                    total = sum(t for _, t in hops)
                                    for lid, t in hops:
                                        links[a, b, lid] += t
                                if direction == 0:
                                    f = total
                                else:
                                    g = total
                        fwd[a, b, k, m] = max(fwd[a, b, k, m], f)
                        if backward:
                            bwd[a, b, m, k] = max(bwd[a, b, m, k], g)
        return _Edge(np.ascontiguousarray(fwd.transpose(3, 0, 1, 2)),
                     np.ascontiguousarray(bwd.transpose(2, 0, 1, 3)),
                     np.ascontiguousarray(bwd.transpose(3, 1, 0, 2)), links, recv)

    def param_outcome(self, name: str, user_configs: tuple[int, ...]) -> _ParamOutcome:
        """Shards, all-reduces, updates and per-task tails of parameter ``name`` when
        its users (``param_users[name]``) have the given config indices."""
        key = (name, user_configs)
        out = self._param_cache.get(key)
        if out is not None:
            return out
        D, L = self.D, self.L
        users = self.param_users[name]
        config_of = dict(zip(users, user_configs))
        blocks = []
        for i, j in self.param_slots[name]:
            op, config = self.ops[i], self.configs[i][config_of[i]]
            param = op.params[j]
            for k, region in enumerate(config.regions(op)):
                blocks.append(ParamBlock(op.param_region(j, region), config.devices[k], i * D + k))
        width = dtype_bytes(param.dtype)
        groups = replica_groups(blocks)
        shard = np.zeros(D)
        for g in groups:
            for d in g.devices:
                shard[d] += g.numel * width
        out = _ParamOutcome(shard, np.zeros(D), np.zeros(L))
        if self.training:
            bucket_bytes = cluster_bucket_limit(self.cluster)
            for d in range(D):
                if shard[d]:
                    out.updates[d] = self.cost_model.update_s(int(shard[d]), self.cluster.device(d))
            for i in users:
                out.tails[i] = np.zeros(D)
            for g in groups:
                sync = 0.0
                links: tuple[int, ...] = ()
                if len(g.devices) > 1:
                    ring = list(zip(g.devices, g.devices[1:] + g.devices[:1]))
                    try:
                        sync = self.cost_model.allreduce_s(g.numel * width, g.devices, self.cluster)
                        links = tuple(sorted({link.id for x, y in ring
                                             for link in self.cluster.route(x, y)}))
                    except ClusterError:  # no ring: the simulator cannot simulate this
                        sync = math.inf
                        out.syncs[:] = math.inf
                    if g.numel * width < bucket_bytes:
                        links = ()   # may share a bucket: its time, not its links' load
                    out.syncs[list(links)] += sync
                after = sync + max(out.updates[d] for d in g.devices)
                tasks = [divmod(t, D) for t in g.tasks]
                for i, k in tasks:
                    out.tails[i][k] = max(out.tails[i][k], after)
                out.groups.append((sync, links, g.devices, tasks))
        self._param_cache[key] = out
        return out

    def partial_shard(self, name: str, user_configs: tuple[int, ...]) -> np.ndarray:
        """Bytes of parameter ``name`` per device held by its assigned users (-1: not
        assigned) — at most what the completed strategy holds."""
        key = (name, user_configs)
        shard = self._shard_cache.get(key)
        if shard is None:
            config_of = dict(zip(self.param_users[name], user_configs))
            blocks, width = [], 0
            for i, j in self.param_slots[name]:
                if config_of[i] < 0:
                    continue
                op, config = self.ops[i], self.configs[i][config_of[i]]
                width = dtype_bytes(op.params[j].dtype)
                for k, region in enumerate(config.regions(op)):
                    blocks.append(ParamBlock(op.param_region(j, region), config.devices[k], k))
            shard = np.zeros(self.D)
            for g in (replica_groups(blocks) if blocks else ()):
                for d in g.devices:
                    shard[d] += g.numel * width
            self._shard_cache[key] = shard
        return shard

    def feasible(self, a: list[int], i: int, c: int) -> bool:
        """Whether the complete assignment ``a`` with op ``i`` in config ``c`` has a
        route for every transfer and all-reduce it needs (else it cannot be simulated)."""
        for p in self.preds[i]:
            if not np.isfinite(self.edges[(p, i)].links[a[p], c]).all():
                return False
        for v in self.succs[i]:
            if not np.isfinite(self.edges[(i, v)].links[c, a[v]]).all():
                return False
        if self.training:
            for name in self.op_params[i]:
                cs = tuple(c if u == i else a[u] for u in self.param_users[name])
                if not np.isfinite(self.param_outcome(name, cs).syncs).all():
                    return False
        return True

    # -- the bound -----------------------------------------------------------------

    def bound(self, a: list[int], cutoff: float = math.inf) -> float:
        """A lower bound on the cost of every completion of the partial assignment
        ``a`` (config index per op, -1 for unassigned); see ``exhaustive``. With a
        ``cutoff``, the bound may stop at whatever proves it is at least the cutoff."""
        penalty = self._penalty(a)
        if penalty >= cutoff:
            return penalty
        E, B, R, path = self._paths(a)
        if path + penalty >= cutoff:
            return path + penalty
        return max(path, self.task_bound.bound(a, E, B, R, cutoff - penalty)) + penalty

    def _paths(self, a: list[int]) -> tuple[list, list | None, list | None, float]:
        """E, B, R (see the module docstring) and the critical-path bound."""
        n, edges = self.n, self.edges
        sel = [slice(None) if c < 0 else slice(c, c + 1) for c in a]
        E: list[Any] = [None] * n
        for v in range(n):
            rv = sel[v]
            acc = None
            for p in self.preds[v]:
                # max over the producer's tasks, then min over its configs
                t = (E[p].T[:, :, None, None]
                     + edges[(p, v)].fwd[:, sel[p], rv]).max(axis=0).min(axis=0)
                acc = t if acc is None else np.maximum(acc, t, out=acc)
            E[v] = self.dF[v][rv] + (self.mask_off[v][rv] if acc is None else
                                     np.maximum(acc, self.mask_off[v][rv], out=acc))
        if not self.training:
            return E, None, None, max(float(E[v].max(axis=1).min()) for v in range(n))
        B: list[Any] = [None] * n
        for v in reversed(range(n)):
            if not self.has_bwd[v]:
                continue
            rv = sel[v]
            acc = E[v].copy()
            for s in self.succs[v]:
                t = (B[s].T[:, :, None, None]
                     + edges[(v, s)].gradT[:, sel[s], rv]).max(axis=0).min(axis=0)
                np.maximum(acc, t, out=acc)
            B[v] = acc + self.dB[v][rv]
        best = 0.0
        R: list[Any] = [None] * n
        for v in range(n):
            if not self.has_bwd[v]:
                continue
            cv, rv = a[v], sel[v]
            acc = self.sole_tail[v][rv] + self.mask_off[v][rv]
            if cv >= 0:
                for name in self.op_params[v]:
                    users = self.param_users[name]
                    if len(users) > 1:
                        cs = tuple(a[i] for i in users)
                        if min(cs) >= 0:
                            np.maximum(acc, self.param_outcome(name, cs).tails[v], out=acc)
            for p in self.preds[v]:
                if not self.has_bwd[p]:
                    continue
                x = self.dB[p][sel[p]] + R[p]
                t = (x.T[:, :, None, None]
                     + edges[(p, v)].grad[:, sel[p], rv]).max(axis=0).min(axis=0)
                np.maximum(acc, t, out=acc)
            R[v] = acc
            best = max(best, float((B[v] + acc).max(axis=1).min()))
        return E, B, R, best

    def _penalty(self, a: list[int]) -> float:
        if self.memory == MemoryPolicy.IGNORE:
            return 0.0
        D = self.D
        total, ws, params = np.zeros(D), np.zeros(D), np.zeros(D)
        for i, c in enumerate(a):
            if c >= 0:
                total += self.kept[i][c]
                np.maximum(ws, self.ws[i][c], out=ws)
        for (p, v), e in self.edges.items():
            if a[p] >= 0 and a[v] >= 0:
                total += e.recv[a[p], a[v]]
        for name, users in self.param_users.items():
            cs = tuple(a[i] for i in users)
            if max(cs) >= 0:
                params += self.partial_shard(name, cs)
        total += ws + params * (3 if self.training else 1)
        over = float(np.maximum(total - self.capacity, 0.0).sum())
        if over <= 0:
            return 0.0
        return math.inf if self.memory == MemoryPolicy.REJECT else over / 1e6 * PENALTY_S_PER_MB


def lower_bound(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                assigned: dict[str, ParallelConfig], *, training: bool = True,
                memory: MemoryPolicy | str = MemoryPolicy.PENALIZE) -> float:
    """The branch-and-bound lower bound on the cost of every strategy that gives the ops
    in ``assigned`` those configs (the others any valid config). For tests and
    diagnostics: it builds the tables each call."""
    tables = BoundTables(graph, cluster, cost_model, training, MemoryPolicy(memory))
    a = [tables.configs[op.index].index(assigned[op.name]) if op.name in assigned else -1
         for op in graph.ops]
    return tables.bound(a)
