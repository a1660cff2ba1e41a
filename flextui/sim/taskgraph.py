"""The task graph of one training (or inference) iteration (paper section 5.1).

Tasks live in parallel arrays indexed by task id; ids of removed tasks are reused. What
the scheduler reads (durations, keys, resources, liveness, dependencies) lives in a
task store (``taskstore``: C arrays, or a pure-Python fallback); the rest (what each
task is, for timelines and memory) in the lists here.
For every op, one forward task per block of its config (and one backward task in
training). For every producer/consumer task pair whose blocks overlap: a dependency
when both run on one device, else a chain of transfer tasks, one per link of the route,
carrying the overlap; in training, the gradient of the overlap travels back the reverse
route. Replicated parameters get a gradient all-reduce per replica group (ring
all-reduce on the links joining the group, timed by the cost model's
``allreduce_s(nbytes, devices, cluster)``), then an optimizer update per device (its
``update_s``). On a cluster whose devices drive their own communication
(``Cluster.host_driven_comm``: CPU ranks with no core to spare), a transfer hop also
holds the device at either end of its link, and an all-reduce every device of its
group: communication then takes the devices' time as well as the links'.

Every task has a *key*, a tuple that orders tasks consistently with their
dependencies; the scheduler breaks ties in ready time by it, so schedules are
deterministic: forward before backward before syncs before updates; within forward,
by op topological index, transfers into a task before the task, then by task index;
within backward, by reverse topological index likewise.

``replace_ops`` swaps some ops' configs, rebuilding only those ops' tasks, the transfers
on their edges and the gradient syncs and updates of their parameters; delta simulation
uses it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flextui.cost.model import CostModel
from flextui.errors import ClusterError
from flextui.graph import Op, OpGraph, region_volume
from flextui.graph.tensor import dtype_bytes
from flextui.machine import Cluster, Link
from flextui.sim.overlaps import block_overlaps
from flextui.sim.replicas import ReplicaGroup, replica_plan
from flextui.sim.taskstore import check_deadline, new_store
from flextui.strategy import ParallelConfig, Strategy


class TaskKind(enum.IntEnum):
    FORWARD = 0
    BACKWARD = 1
    TRANSFER = 2
    SYNC = 3
    UPDATE = 4


#: entries a plan memo keeps before it starts over (bounds memory on long searches)
PLAN_MEMO_LIMIT = 200_000


class TaskGraph:
    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 strategy: Strategy, training: bool = True) -> None:
        self.graph, self.cluster, self.cost, self.training = graph, cluster, cost_model, training
        self.num_devices = cluster.num_devices
        self.num_resources = cluster.num_devices + len(cluster.links)
        self.link_resource = {link.id: self.num_devices + link.id for link in cluster.links}
        #: the resources a transfer over each link holds: the link, and on a cluster whose
        #: devices drive their communication, the devices at its ends
        self.hop_resources = {link.id: self._hop_resources(link) for link in cluster.links}
        self.store = new_store(self.num_resources)  # scheduling data, the ids' owner
        # parallel arrays, one slot per task id
        self.kind: list[int] = []
        self.op: list[int] = []          # op index, or -1 for syncs and updates
        self.part: list[int] = []        # task index within the op's config
        self.resources: list[tuple[int, ...]] = []
        self.nbytes: list[int] = []       # bytes moved (transfers, syncs) or kept (forward)
        self.workspace: list[int] = []
        self.key: list[tuple] = []
        self.keeps: list[int] = []        # device that keeps the task's bytes as an
                                          # activation (forward outputs, the last hop of
                                          # an input received), or -1
        self._added: list[int] | None = None  # ids made while replace_ops runs
        # ownership, so one op's tasks can be replaced
        self.configs: dict[int, ParallelConfig] = {}
        self.forward: dict[int, list[int]] = {}
        self.backward: dict[int, list[int]] = {}
        self.edge_tasks: dict[tuple[int, int], list[int]] = {}
        self.param_tasks: dict[str, list[int]] = {}
        self.param_shards: dict[str, dict[int, int]] = {}  # parameter -> device -> bytes
        self.param_users: dict[str, list[tuple[Op, int]]] = {}
        self.param_order = {name: i for i, name in enumerate(graph.parameters)}
        self._param_region_memo: dict[tuple, tuple] = {}
        self._edge_plan_memo: dict[tuple, tuple] = {}
        self._replica_plan_memo: dict[tuple, list] = {}
        self._ring_memo: dict[tuple[int, ...], tuple[int, ...]] = {}
        for op in graph.ops:
            for i, p in enumerate(op.params):
                self.param_users.setdefault(p.name, []).append((op, i))
        for op in graph.ops:
            self._add_op_tasks(op, strategy[op.name])
        for op in graph.ops:
            for producer in graph.predecessors(op):
                self._add_edge(producer, op)
        for name in self.param_users:
            self._add_param_tasks(name)

    # -- the arrays ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.kind)

    def live_ids(self) -> list[int]:
        return self.store.live_ids()

    def _new(self, kind: TaskKind, op: int, part: int, resources: tuple[int, ...],
             duration: float, key: tuple, nbytes: int = 0, workspace: int = 0,
             keeps: int = -1) -> int:
        t = self.store.add(resources, duration, key)
        if t < len(self.kind):   # a freed id, reused
            self.kind[t], self.op[t], self.part[t], self.resources[t] = kind, op, part, resources
            self.nbytes[t], self.workspace[t], self.key[t], self.keeps[t] = \
                nbytes, workspace, key, keeps
        else:   # written out, not looped over: this runs once per task of a simulation
            self.kind.append(kind)
            self.op.append(op)
            self.part.append(part)
            self.resources.append(resources)
            self.nbytes.append(nbytes)
            self.workspace.append(workspace)
            self.key.append(key)
            self.keeps.append(keeps)
        if self._added is not None:
            self._added.append(t)
        return t

    def _link(self, a: int, b: int) -> None:
        self.store.link(a, b)

    # -- building ------------------------------------------------------------------

    def _add_op_tasks(self, op: Op, config: ParallelConfig) -> None:
        self.configs[op.index] = config
        shape = config.block_shape(op)
        kept = sum(region_volume(r) * dtype_bytes(t.dtype)
                   for r, t in zip(op.output_regions(config.task_region(op, 0)), op.outputs))
        fwd, bwd = [], []
        for k, device in enumerate(config.devices):
            cost = self.cost.op_cost(op, shape, self.cluster.device(device))
            f = self._new(TaskKind.FORWARD, op.index, k, (device,), cost.forward_s,
                          (0, op.index, 1, k), kept, cost.workspace_bytes, keeps=device)
            fwd.append(f)
            if self.training and op.type != "input":
                b = self._new(TaskKind.BACKWARD, op.index, k, (device,), cost.backward_s,
                              (1, -op.index, 1, k))
                self._link(f, b)
                bwd.append(b)
        self.forward[op.index], self.backward[op.index] = fwd, bwd

    def _add_edge(self, producer: Op, consumer: Op) -> None:
        """Dependencies and transfers for every input of ``consumer`` made by ``producer``."""
        tasks: list[int] = []
        self.edge_tasks[(producer.index, consumer.index)] = tasks
        pconf, cconf = self.configs[producer.index], self.configs[consumer.index]
        backward = self.training and producer.type != "input"
        pfwd, cfwd = self.forward[producer.index], self.forward[consumer.index]
        pbwd, cbwd = self.backward[producer.index], self.backward[consumer.index]
        for slot, k, m, nbytes in self._edge_plan(producer, consumer, pconf, cconf):
            src, dst = pconf.devices[m], cconf.devices[k]
            self._connect(pfwd[m], cfwd[k], src, dst, nbytes, (0, consumer.index, 0, k, slot, m),
                          tasks)
            if backward:
                self._connect(cbwd[k], pbwd[m], dst, src, nbytes,
                              (1, -producer.index, 0, m, consumer.index, slot, k), tasks)

    def _edge_plan(self, producer: Op, consumer: Op, pconf: ParallelConfig,
                   cconf: ParallelConfig) -> tuple[tuple[int, int, int, int], ...]:
        """``block_overlaps`` of the two configs, memoised: a search proposes the same
        configs again and again."""
        memo_key = (producer.index, consumer.index, pconf, cconf)
        plan = self._edge_plan_memo.get(memo_key)
        if plan is None:
            if len(self._edge_plan_memo) >= PLAN_MEMO_LIMIT:
                self._edge_plan_memo.clear()
            plan = self._edge_plan_memo[memo_key] = block_overlaps(producer, consumer, pconf,
                                                                   cconf)
        return plan

    def _hop_resources(self, link: Link) -> tuple[int, ...]:
        held = [self.link_resource[link.id]]
        if self.cluster.host_driven_comm:
            ids = {d.name: d.id for d in self.cluster.devices}
            held += [ids[end] for end in (link.src, link.dst) if end in ids]
        return tuple(sorted(held))

    def _route(self, src: int, dst: int, why: Callable[[], str]):
        """The route from device ``src`` to ``dst``; without one, a ClusterError saying
        ``why()`` it was needed (worded only then: routes are asked for on a hot path)."""
        try:
            return self.cluster.route(src, dst)
        except ClusterError as exc:
            raise ClusterError(f"{why()}: {exc}") from None

    def _connect(self, a: int, b: int, src: int, dst: int, nbytes: int, key: tuple,
                 owned: list[int]) -> None:
        """``b`` needs ``nbytes`` that ``a`` made: a dependency, or a transfer chain (whose
        last hop into a forward task is an input block its device keeps)."""
        prev = a
        if src == dst:
            self._link(prev, b)
            return
        ops = self.graph.ops
        route = self._route(src, dst, lambda: f"op {ops[self.op[b]].name!r} needs data from "
                                              f"op {ops[self.op[a]].name!r}")
        for hop, link in enumerate(route):
            keeps = dst if hop == len(route) - 1 and self.kind[b] == TaskKind.FORWARD else -1
            t = self._new(TaskKind.TRANSFER, self.op[b], self.part[b],
                          self.hop_resources[link.id], self.cost.transfer_s(nbytes, link),
                          key + (hop,), nbytes, keeps=keeps)
            self._link(prev, t)
            owned.append(t)
            prev = t
        self._link(prev, b)

    def _add_param_tasks(self, name: str) -> None:
        """Record where parameter ``name``'s shards live; in training, all-reduce every
        replica group's gradients, then update each device's shard."""
        users = self.param_users[name]
        param = users[0][0].params[users[0][1]]
        configs = tuple(self.configs[op.index] for op, _ in users)
        producers = [task for (op, _), config in zip(users, configs)
                     for task in (self.backward[op.index] if self.training
                                  else [-1] * config.num_tasks)]
        tasks: list[int] = []
        self.param_tasks[name] = tasks
        order, width = self.param_order[name], dtype_bytes(param.dtype)
        shard_bytes: dict[int, int] = {}
        ready_on: dict[int, list[int]] = {}
        groups = [ReplicaGroup(devices, numel, tuple(sorted({producers[i] for i in blocks})))
                  for devices, numel, blocks in self._replica_plan(name, users, configs)]
        for group in groups:
            for d in group.devices:
                shard_bytes[d] = shard_bytes.get(d, 0) + group.numel * width
        self.param_shards[name] = shard_bytes
        if not self.training:
            return
        for g, group in enumerate(groups):
            nbytes = group.numel * width
            if len(group.devices) == 1:
                ready_on.setdefault(group.devices[0], []).extend(group.tasks)
                continue
            sync = self._new(TaskKind.SYNC, -1, g, self._ring_resources(name, group.devices),
                             self.cost.allreduce_s(nbytes, group.devices, self.cluster),
                             (2, order, g), nbytes)
            for t in group.tasks:
                self._link(t, sync)
            tasks.append(sync)
            for d in group.devices:
                ready_on.setdefault(d, []).append(sync)
        for d in sorted(shard_bytes):
            update = self._new(TaskKind.UPDATE, -1, d, (d,),
                               self.cost.update_s(shard_bytes[d], self.cluster.device(d)),
                               (3, order, d), shard_bytes[d])
            for t in dict.fromkeys(ready_on[d]):
                self._link(t, update)
            tasks.append(update)

    def _ring_resources(self, name: str, devices: tuple[int, ...]) -> tuple[int, ...]:
        """What an all-reduce over ``devices`` holds: the links of its ring (and, on a
        cluster whose devices drive their communication, the devices); memoised, as
        every parameter of a data-parallel op rings the same devices."""
        held = self._ring_memo.get(devices)
        if held is None:
            if len(self._ring_memo) >= PLAN_MEMO_LIMIT:
                self._ring_memo.clear()
            ring = list(zip(devices, devices[1:] + devices[:1]))
            links = sorted({self.link_resource[link.id] for a, b in ring
                            for link in self._route(a, b, lambda: f"the gradients of "
                                                    f"parameter {name!r} are all-reduced")})
            if self.cluster.host_driven_comm:
                links = sorted(devices) + links
            held = self._ring_memo[devices] = tuple(links)
        return held

    def _replica_plan(self, name: str, users: list[tuple[Op, int]],
                      configs: tuple[ParallelConfig, ...]) -> list:
        """``replica_plan`` of parameter ``name`` under its users' ``configs`` (memoised:
        a parameter shared by many ops is regrouped whenever one of them changes)."""
        memo_key = (name, configs)
        plan = self._replica_plan_memo.get(memo_key)
        if plan is None:
            blocks = tuple((region, config.devices[k])
                           for (op, i), config in zip(users, configs)
                           for k, region in enumerate(self._param_regions(op, i, config)))
            if len(self._replica_plan_memo) >= PLAN_MEMO_LIMIT:
                self._replica_plan_memo.clear()
            plan = self._replica_plan_memo[memo_key] = replica_plan(blocks)
        return plan

    def _param_regions(self, op: Op, i: int, config: ParallelConfig) -> tuple:
        """The shard of ``op``'s parameter ``i`` each task of ``config`` uses (memoised:
        a parameter shared by many ops is regrouped whenever one of them changes)."""
        key = (op.index, i, config)
        regions = self._param_region_memo.get(key)
        if regions is None:
            regions = tuple(op.param_region(i, r) for r in config.regions(op))
            self._param_region_memo[key] = regions
        return regions

    # -- changing ops ----------------------------------------------------------------

    def replace_ops(self, changes: Sequence[tuple[Op, ParallelConfig]],
                    deadline: float = math.inf) -> Change:
        """Give each listed op its new config (a later entry for the same op wins):
        detach the tasks the change invalidates (the ops' own, the transfers on their
        edges, the syncs and updates of their parameters) and build new ones, each
        edge and parameter once however many of its ops change. ``commit`` frees the
        detached tasks; ``rollback`` restores them exactly. Once ``time.monotonic()``
        passes ``deadline`` (looked at between edges and parameters) it undoes what it
        did and raises TimeoutError."""
        new = {op.index: (op, config) for op, config in changes}
        ops = [op for op, _ in new.values()]
        edges = list(dict.fromkeys(
            [(p.index, op.index) for op in ops for p in self.graph.predecessors(op)] +
            [(op.index, c.index) for op in ops for c in self.graph.successors(op)]))
        params = list(dict.fromkeys(p.name for op in ops for p in op.params))
        change = Change({i: (self.configs[i], self.forward[i], self.backward[i]) for i in new},
                        {e: self.edge_tasks[e] for e in edges},
                        {name: self.param_tasks[name] for name in params},
                        {name: self.param_shards[name] for name in params})
        change.removed = [t for _, fwd, bwd in change.ops.values() for t in fwd + bwd] + \
            [t for ts in change.edges.values() for t in ts] + \
            [t for ts in change.param_tasks.values() for t in ts]
        self.store.detach(change.removed)
        self._added = []
        try:
            for op, config in new.values():
                self._add_op_tasks(op, config)
            for a, b in edges:
                check_deadline(deadline, "the task graph's edit")
                self._add_edge(self.graph.ops[a], self.graph.ops[b])
            for name in params:
                check_deadline(deadline, "the task graph's edit")
                self._add_param_tasks(name)
        except TimeoutError:
            change.added, self._added = self._added, None
            self.rollback(change)
            raise
        change.added, self._added = self._added, None
        return change

    def commit(self, change: Change) -> None:
        self.store.release(change.removed)

    def rollback(self, change: Change) -> None:
        for t in change.added:
            self.store.remove(t)
        self.store.attach(change.removed)
        for i, (config, forward, backward) in change.ops.items():
            self.configs[i], self.forward[i], self.backward[i] = config, forward, backward
        self.edge_tasks.update(change.edges)
        self.param_tasks.update(change.param_tasks)
        self.param_shards.update(change.param_shards)


@dataclass
class Change:
    """What ``TaskGraph.replace_ops`` changed, enough to undo it."""

    ops: dict[int, tuple[ParallelConfig, list[int], list[int]]]  # op index -> its old
                                                                 # config, forward, backward
    edges: dict[tuple[int, int], list[int]]
    param_tasks: dict[str, list[int]]
    param_shards: dict[str, dict[int, int]]
    removed: list[int] = field(default_factory=list)
    added: list[int] = field(default_factory=list)
