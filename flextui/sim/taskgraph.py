"""The task graph of one training (or inference) iteration (paper section 5.1).

For every op, one forward task per block of its config (and one backward task in
training). For every producer/consumer task pair whose blocks overlap: a dependency
when both run on one device, else a chain of transfer tasks, one per link of the route,
carrying the overlap; in training, the gradient of the overlap travels back the reverse
route. Replicated parameters get a gradient all-reduce per replica group (ring
all-reduce on the links joining the group, timed by the cost model's
``allreduce_s(nbytes, devices, cluster)``), then an optimizer update per device (its
``update_s``). A parameter whose training state is sharded (``strategy.shards``) sums
each group's gradients by a reduce-scatter and gathers the updated elements by an
all-gather: one sync task of the all-reduce's bytes and time (the all-gather, after the
update in a run, is folded into it: the same sum along the chain), and each device
updates its part of the group's elements alone. At stage 3 (a parameter one op uses)
the sync is the reduce-scatter alone (half the all-reduce's time, ``allgather_s``),
every group on several devices is summed alone (never bucketed), and before the op's
tasks on the group's devices run, forward and again backward, an all-gather task of
the group's bytes on its ring runs after what those tasks wait for (their inputs, or
their outputs' gradients): the rank gathers once its inputs are there, as the runtime
does; each device keeps its part of the parameter, and the gathered bytes count in
the op's workspace (held while it runs). On a cluster whose devices drive their
own communication (``Cluster.host_driven_comm``: CPU ranks with no core to spare), a
transfer hop also holds the device at either end of its link, and an all-reduce every
device of its group: communication then takes the devices' time as well as the links'.

With micro-batches (``strategy.pipeline``) the ops and edges are planned for one
micro-batch (``Planner(microbatches=m)``) and every op's tasks, its edges' transfers and
its gathers are made once per micro-batch; the schedule orders each op's tasks over the
micro-batches by dependencies (``pipeline.micro_deps``: GPipe's flush, 1F1B's window), a
1F1B op's forward tasks past its window keep no activation (the memory of at most that
many micro-batches in flight), and a parameter's sync waits for every micro-batch's
backward tasks (the gradients accumulated). Micro-batches go through a stage one after
another (``pipeline.stage_links``: a stage's first ops wait for its last ops' previous
micro-batch, forward, and the other way round, backward; ``micro.link_stages``).

Every task has a *key*, a tuple that orders tasks consistently with their
dependencies; the scheduler breaks ties in ready time by it, so schedules are
deterministic: forward before backward before syncs before updates; within forward,
by op topological index, transfers into a task before the task, then by task index;
within backward, by reverse topological index likewise. The keys:

- forward ``(0, op, 1, k)``, backward ``(1, -op, 1, k)``;
- a transfer into consumer task ``k``'s input ``slot`` from producer task ``m``, hop
  ``h``: ``(0, consumer, 0, k, slot, m, h)``; its gradient back ``(1, -producer, 0, m,
  consumer, slot, k, h)``;
- the all-reduce of bucket ``g`` of the unit whose first parameter is number ``p``
  ``(2, p, g)``, the unit's update on device ``d`` ``(3, p, d)``;
- the all-gather of group ``g`` of the op's parameter ``i`` before its forward tasks
  ``(0, op, 0, -1, i, g)``, before its backward tasks ``(1, -op, 0, -1, i, g)``;
- in micro-batch ``j`` (of a graph of ``N`` ops), the forward-pass keys' ``op`` (or
  ``consumer``) is ``op + j*N`` and the backward-pass keys' ``-op`` (or ``-producer``)
  is ``j*N - op``: micro-batch by micro-batch, each in the order above
  (``micro.micro_of_key``).

The tasks live in a task store (``taskstore``: C arrays, or the pure-Python twin), made
in bulk from plans (``plans``) Python computes once per op and config. The graph keeps
which tasks each op, edge and parameter owns, as ``array('i')`` of ids.

``replace_ops`` swaps some ops' configs, rebuilding only those ops' tasks, the transfers
on their edges, the gathers of the ops at either end of those edges and the gradient
syncs and updates of the units their parameters are in, or whose buckets the change
moved; delta simulation uses it.
"""

from __future__ import annotations

import enum
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from flextui.cost.model import CostModel
from flextui.cost.optimizers import OptimizerKind
from flextui.graph import Op, OpGraph
from flextui.machine import Cluster
from flextui.sim.buckets import bucket_units, sync_order
from flextui.sim.deadline import check_deadline
from flextui.sim.micro import every_micro, link_stages
from flextui.sim.plans import Planner
from flextui.sim.taskstore import new_store
from flextui.sim.unit_plan import ParamPlan, Shards
from flextui.strategy import ParallelConfig, ShardStage, Strategy
from flextui.strategy.pipeline import (
    Pass,
    micro_deps,
    stage_links,
    stages as pipeline_stages,
    windows,
)


class TaskKind(enum.IntEnum):
    FORWARD = 0
    BACKWARD = 1
    TRANSFER = 2
    SYNC = 3
    UPDATE = 4
    GATHER = 5


def _ids(*parts: Sequence[int]) -> array:
    out = array("i")
    for part in parts:
        out.extend(part)
    return out


class TaskGraph:
    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 strategy: Strategy, training: bool = True, master_dtype: str | None = None,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> None:
        """``master_dtype``: the dtype parameters, their gradients and the optimizer's
        state are kept in, when not the graph's (a graph computing in bf16 keeps float32
        master weights); ``optimizer``: the update each shard's update task times."""
        self.graph, self.cluster, self.cost, self.training = graph, cluster, cost_model, training
        self.num_devices = cluster.num_devices
        self.num_resources = cluster.num_devices + len(cluster.links)
        self.link_resource = {link.id: self.num_devices + link.id for link in cluster.links}
        self.store = new_store(self.num_resources)
        self.pipeline = strategy.pipeline
        #: micro-batches, and what a micro-batch adds to an op's place in the keys
        self.micro, self.num_ops = strategy.pipeline.microbatches, len(graph.ops)
        self.plans = Planner(graph, cluster, cost_model, self.store, training, master_dtype,
                             self.micro, optimizer)
        # ownership, so one op's tasks can be replaced
        self.configs: dict[int, ParallelConfig] = {}
        self.forward: dict[int, array] = {}
        self.backward: dict[int, array] = {}
        self.edge_tasks: dict[tuple[int, int], array] = {}
        #: per op with parameters at stage 3, its all-gather tasks
        self.gathers: dict[int, array] = {}
        self.param_plans: dict[str, ParamPlan] = {}
        self.param_shards: dict[str, Shards] = {}
        self.param_users: dict[str, list[tuple[Op, int]]] = {}
        #: the parameters whose training state is sharded, by stage (``strategy.shards``)
        self.stages: dict[str, ShardStage] = dict(strategy.shards)
        self.param_order = {name: i for i, name in enumerate(graph.parameters)}
        for op in graph.ops:
            for i, p in enumerate(op.params):
                self.param_users.setdefault(p.name, []).append((op, i))
        self.sync_order = sync_order(self.param_users)
        #: in training, the units (``buckets``) and their syncs' and updates' tasks
        self.units: dict[tuple[str, ...], Unit] = {}
        for op in graph.ops:
            self.configs[op.index] = strategy[op.name]
        #: per op, the micro-batches it holds in flight (``pipeline.windows``), and the
        #: (last, first) op pairs that take micro-batches through a stage in turn
        self.windows, self.links = self._stage_structure(self.configs)
        for name in self.param_users:
            self._plan_param(name)
        for op in graph.ops:
            self._add_op_tasks(op, strategy[op.name])
        for op in graph.ops:
            for producer in graph.predecessors(op):
                self._add_edge(producer, op)
        self._link_stages(self.links)   # before the gathers: they wait as their ops do
        for op in graph.ops:
            self._add_gathers(op)
        for unit in self._cut_units():
            self._add_unit(unit)
        self.store.trim()

    def __len__(self) -> int:
        return len(self.store)

    def live_ids(self) -> array:
        return self.store.live_ids()

    def resources(self, t: int) -> tuple[int, ...]:
        """The devices and links (resource ids) task ``t`` holds."""
        return self.store.resource_set(self.store.info(t)[3])

    def _stage_structure(self, configs: Mapping[int, ParallelConfig],
                         ) -> tuple[list[int], frozenset[tuple[int, int]]]:
        """Per op its window (``pipeline.windows``), and the stage links
        (``pipeline.stage_links``), under ``configs`` (by op index)."""
        ordered = [configs[i] for i in range(self.num_ops)]
        if self.micro == 1:
            return [1] * self.num_ops, frozenset()
        stage = pipeline_stages(self.graph, ordered)
        return (windows(self.graph, ordered, self.pipeline, stage),
                stage_links(self.graph, ordered, stage))

    def _link_stages(self, links: Iterable[tuple[int, int]]) -> None:
        link_stages(self.store, links, self.configs, self.forward, self.backward, self.micro)

    def _part(self, tasks: array, j: int, n: int) -> array:
        """Micro-batch ``j``'s ``n`` tasks of an op's ``tasks`` (all of them, in order,
        for micro-batch 0, 1, ...)."""
        return tasks if self.micro == 1 else tasks[j * n:(j + 1) * n]

    # -- building ------------------------------------------------------------------

    def _add_op_tasks(self, op: Op, config: ParallelConfig) -> array:
        """The op's tasks, micro-batch by micro-batch, ordered over them by the schedule
        (its parameters planned first: what it gathers is held in its workspace)."""
        self.configs[op.index] = config
        plan = self.plans.op(op, config)
        gathered: dict[int, int] = {}   # device -> bytes of the groups it gathers
        for _, param in self._gathered(op):
            for g in range(len(param.gnbytes)):
                for d in param.gdevices[param.gdevs[g]:param.gdevs[g + 1]]:
                    gathered[d] = gathered.get(d, 0) + param.gnbytes[g]
        workspace = plan.workspace + max(gathered.values(), default=0)
        window = self.windows[op.index]
        if self.micro == 1:
            fwd, bwd = self.store.add_op(op.index, plan.devices, plan.forward, plan.backward,
                                         plan.kept, workspace)
        else:
            fwd, bwd = array("i"), array("i")
            for j in range(self.micro):
                f, b = self.store.add_op(op.index, plan.devices, plan.forward, plan.backward,
                                         plan.kept, workspace, j * self.num_ops, j < window)
                fwd.extend(f)
                bwd.extend(b)
            if bwd:
                n, passes = len(plan.devices), {Pass.FORWARD: fwd, Pass.BACKWARD: bwd}
                for (pa, ja), (pb, jb) in micro_deps(self.pipeline, window):
                    for k in range(n):
                        self.store.link(passes[pa][ja * n + k], passes[pb][jb * n + k])
        self.forward[op.index], self.backward[op.index] = fwd, bwd
        return _ids(fwd, bwd)

    def _gathered(self, op: Op) -> list[tuple[int, ParamPlan]]:
        """(index, plan) of each of ``op``'s parameters at stage 3 (one op uses it: this)."""
        return [(i, self.param_plans[p.name]) for i, p in enumerate(op.params)
                if self.stages.get(p.name) == ShardStage.PARAMETERS]

    def _add_gathers(self, op: Op) -> array:
        """The all-gathers of ``op``'s stage-3 parameters' groups on several devices, each
        after what the op's tasks on those devices wait for, before those tasks: once
        before its forward tasks and, in training, once before its backward tasks."""
        made = array("i")
        config = self.configs[op.index]
        n = len(config.devices)
        passes = []
        for j in range(self.micro):
            shift = j * self.num_ops
            passes.append((0, op.index + shift, self._part(self.forward[op.index], j, n)))
            if self.training:
                passes.append((1, shift - op.index, self._part(self.backward[op.index], j, n)))
        for i, plan in self._gathered(op):
            for g in range(len(plan.gnbytes)):
                devices = set(plan.gdevices[plan.gdevs[g]:plan.gdevs[g + 1]])
                if len(devices) < 2:
                    continue
                for phase, order, tasks in passes:
                    mine = [t for k, t in enumerate(tasks) if config.devices[k] in devices]
                    preds = sorted({p for t in mine for p in self.store.preds(t)}
                                   - set(made))
                    made.append(self.store.add_gather(
                        op.index, g, plan.grsets[g], plan.gathers[g], plan.gnbytes[g],
                        (phase, order, 0, -1, i, g), preds, mine))
        if made:
            self.gathers[op.index] = made
        else:
            self.gathers.pop(op.index, None)
        return made

    def _add_edge(self, producer: Op, consumer: Op) -> array:
        """Dependencies and transfers for every input of ``consumer`` made by ``producer``."""
        pconf, cconf = self.configs[producer.index], self.configs[consumer.index]
        p = self.plans.edge(producer, consumer, pconf, cconf)
        np_, nc = len(pconf.devices), len(cconf.devices)
        tasks = array("i")
        for j in range(self.micro):
            tasks.extend(self.store.add_edge(
                producer.index, consumer.index, self._part(self.forward[producer.index], j, np_),
                self._part(self.forward[consumer.index], j, nc),
                self._part(self.backward[producer.index], j, np_),
                self._part(self.backward[consumer.index], j, nc), p.slot, p.k, p.m, p.nbytes,
                p.fhops, p.frsets, p.fdurations, p.bhops, p.brsets, p.bdurations,
                j * self.num_ops))
        self.edge_tasks[(producer.index, consumer.index)] = tasks
        return tasks

    def _plan_param(self, name: str) -> None:
        """Plan parameter ``name`` under its users' configs: where its shards live and,
        in training, its replica groups' all-reduces and its updates."""
        users = self.param_users[name]
        plan = self.plans.param(name, users, tuple(self.configs[op.index] for op, _ in users),
                                self.stages.get(name, ShardStage.NONE))
        self.param_plans[name] = plan
        self.param_shards[name] = plan.shards

    def _cut_units(self) -> list[tuple[str, ...]]:
        """The units the current plans' buckets make (none in inference)."""
        if not self.training:
            return []
        return bucket_units(((name, self.param_plans[name].syncs) for name in self.sync_order),
                            self.plans.bucket_bytes)

    def _add_unit(self, names: tuple[str, ...]) -> array:
        """All-reduce every bucket of the unit ``names`` (a group on one device needs
        none), then update each device's shards of its parameters."""
        # the backward tasks of the parameters' users, micro-batch by micro-batch
        producers = [[_ids(*(self._part(self.backward[op.index], j,
                                        len(self.configs[op.index].devices))
                             for op, _ in self.param_users[name])) for name in names]
                     for j in range(self.micro)]
        if len(names) == 1:   # a parameter's groups are of distinct device sets: one each
            plan, buckets = self.param_plans[names[0]], None
        else:
            plan, members = self.plans.unit([self.param_plans[n] for n in names],
                                            [len(p) for p in producers[0]])
            buckets = tuple(tuple(names[i] for i in m) for m in members)
        gblocks, gblockids = every_micro(plan.gblocks, plan.gblockids,
                                          sum(len(p) for p in producers[0]), self.micro)
        tasks = self.store.add_param(self.param_order[names[0]],
                                     _ids(*(p for part in producers for p in part)), plan.gdevs,
                                     plan.gdevices, gblocks, gblockids, plan.grsets,
                                     plan.gdurations, plan.gnbytes, plan.shards.devices,
                                     plan.udurations, plan.shards.states)
        self.units[names] = Unit(tasks, plan, buckets)
        return tasks

    def buckets(self) -> list[SyncBucket]:
        """Every all-reduce of the iteration (in training), with its sync task's key."""
        out = []
        for names, unit in self.units.items():
            plan, order = unit.plan, self.param_order[names[0]]
            for g in range(len(plan.gnbytes)):
                if plan.grsets[g] >= 0:
                    out.append(SyncBucket((2, order, g),
                                          tuple(plan.gdevices[plan.gdevs[g]:plan.gdevs[g + 1]]),
                                          unit.buckets[g] if unit.buckets else names,
                                          plan.gnbytes[g]))
        return out

    # -- changing ops ----------------------------------------------------------------

    def replace_ops(self, changes: Sequence[tuple[Op, ParallelConfig]],
                    deadline: float = math.inf,
                    stages: Mapping[str, ShardStage] | None = None) -> Change:
        """Give each listed op its new config (a later entry for the same op wins), and
        each parameter in ``stages`` its shard stage: detach the tasks the change
        invalidates (the ops' own, the transfers on their edges, the syncs and updates
        of the units their parameters and the restaged ones are in, and of the units
        whose buckets their new replica groups move) and build new ones, each edge and
        unit once however many of its ops change. ``commit`` frees the
        detached tasks; ``rollback`` restores them exactly. Once ``time.monotonic()``
        passes ``deadline`` (looked at between edges and parameters) it undoes what it
        did and raises TimeoutError."""
        new = {op.index: (op, config) for op, config in changes}
        stages = dict(stages or {})
        full = ShardStage.PARAMETERS
        for name, stage in stages.items():   # into or out of stage 3: its op's tasks change
            if (stage == full) != (self.stages.get(name) == full):
                for op, _ in self.param_users[name]:
                    new.setdefault(op.index, (op, self.configs[op.index]))
        old_stages = None
        if self.micro > 1:
            # a 1F1B op's window and the stage links follow the stages: an op whose window
            # the change moves, or that a stage link the change makes or ends joins, is
            # made anew (with its links)
            moved, links = self._stage_structure(
                {**self.configs, **{i: c for i, (_, c) in new.items()}})
            remade = {i for i, window in enumerate(moved) if window != self.windows[i]}
            remade.update(i for pair in links ^ self.links for i in pair)
            for i in sorted(remade):
                new.setdefault(i, (self.graph.ops[i], self.configs[i]))
            old_stages = (self.windows, self.links)
            self.windows, self.links = moved, links
        ops = [op for op, _ in new.values()]
        edges = list(dict.fromkeys(
            [(p.index, op.index) for op in ops for p in self.graph.predecessors(op)] +
            [(op.index, c.index) for op in ops for c in self.graph.successors(op)]))
        params = list(dict.fromkeys([p.name for op in ops for p in op.params] + list(stages)))
        # gathers wait for what their op's tasks wait for: the ops at either end of a
        # rebuilt edge or of a stage link to a rebuilt op that gather (before the change
        # or after it) gather anew
        linked = [i for pair in self.links if new.keys() & set(pair) for i in pair]
        regather = [i for i in dict.fromkeys([i for e in edges for i in e] + list(new) + linked)
                    if any(full in (self.stages.get(p.name), stages.get(p.name))
                           for p in self.graph.ops[i].params)]
        change = Change({i: (self.configs[i], self.forward[i], self.backward[i]) for i in new},
                        {e: self.edge_tasks[e] for e in edges},
                        {name: self.param_plans[name] for name in params},
                        {name: self.param_shards[name] for name in params},
                        {name: self.stages.get(name, ShardStage.NONE) for name in stages},
                        {i: self.gathers.get(i, array("i")) for i in regather}, old_stages)
        for op, config in new.values():
            self.configs[op.index] = config
        self._set_stages(stages)
        for name in params:
            self._plan_param(name)
        touched = set(params)
        cut = self._cut_units()
        units = [u for u in cut if u not in self.units or touched.intersection(u)]
        now = set(cut)
        change.units = {u: unit for u, unit in self.units.items()
                        if touched.intersection(u) or u not in now}
        for u in change.units:
            del self.units[u]
        change.removed = _ids(*(part for _, fwd, bwd in change.ops.values()
                                for part in (fwd, bwd)),
                              *change.edges.values(), *(u.tasks for u in change.units.values()),
                              *change.gathers.values())
        self.store.detach(change.removed)
        try:
            for op, config in new.values():
                change.added.extend(self._add_op_tasks(op, config))
            for a, b in edges:
                check_deadline(deadline, "the task graph's edit")
                change.added.extend(self._add_edge(self.graph.ops[a], self.graph.ops[b]))
            self._link_stages(pair for pair in self.links if new.keys() & set(pair))
            for i in regather:
                change.added.extend(self._add_gathers(self.graph.ops[i]))
            for u in units:
                check_deadline(deadline, "the task graph's edit")
                change.added.extend(self._add_unit(u))
                change.new_units.append(u)
        except TimeoutError:
            self.rollback(change)
            raise
        return change

    def commit(self, change: Change) -> None:
        self.store.release(change.removed)

    def rollback(self, change: Change) -> None:
        self.store.remove(change.added)
        self.store.attach(change.removed)
        for i, (config, forward, backward) in change.ops.items():
            self.configs[i], self.forward[i], self.backward[i] = config, forward, backward
        self.edge_tasks.update(change.edges)
        for u in change.new_units:
            del self.units[u]
        self.units.update(change.units)
        self.param_plans.update(change.param_plans)
        self.param_shards.update(change.param_shards)
        self._set_stages(change.stages)
        if change.stages_of_ops is not None:
            self.windows, self.links = change.stages_of_ops
        for i, gathers in change.gathers.items():
            if gathers:
                self.gathers[i] = gathers
            else:
                self.gathers.pop(i, None)

    def _set_stages(self, stages: Mapping[str, ShardStage]) -> None:
        for name, stage in stages.items():
            if stage:
                self.stages[name] = stage
            else:
                self.stages.pop(name, None)


@dataclass
class Change:
    """What ``TaskGraph.replace_ops`` changed, enough to undo it."""

    ops: dict[int, tuple[ParallelConfig, array, array]]  # op index -> its old config,
                                                         # forward, backward
    edges: dict[tuple[int, int], array]
    param_plans: dict[str, ParamPlan]
    param_shards: dict[str, Shards]
    stages: dict[str, ShardStage]     # the restaged parameters' old stages
    gathers: dict[int, array]         # op index -> its old gathers (stage 3), maybe none
    #: with micro-batches, the ops' old windows and stage links
    stages_of_ops: tuple[list[int], frozenset[tuple[int, int]]] | None
    units: dict[tuple[str, ...], Unit] = field(default_factory=dict)   # the ones removed
    new_units: list[tuple[str, ...]] = field(default_factory=list)     # the ones built
    removed: array = field(default_factory=lambda: array("i"))
    added: array = field(default_factory=lambda: array("i"))


@dataclass(frozen=True)
class Unit:
    """The tasks of a unit's syncs and updates, the plan they were made from and, for a
    unit of several parameters, the parameters with gradients in each of its buckets."""

    tasks: array
    plan: ParamPlan
    buckets: tuple[tuple[str, ...], ...] | None


@dataclass(frozen=True)
class SyncBucket:
    """One all-reduce: its sync task's key, the devices summing, the parameters whose
    gradients it sums, its bytes."""

    key: tuple[int, ...]
    devices: tuple[int, ...]
    params: tuple[str, ...]
    nbytes: int
