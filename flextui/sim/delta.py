"""Delta simulation (paper section 5.3): change one op's config (or several ops', for
the search's propagation and tied moves), re-simulate only what the change can affect,
and keep or undo it.

``propose`` swaps the op's tasks in the task graph (its own tasks, the transfers on its
edges, the syncs and updates of its parameters) and re-simulates from ``t0``, the
earliest time any removed or added task is ready: everything ready before ``t0`` is
provably unchanged, and after it only tasks whose predecessors or resource queues
changed are re-timed (see ``schedule.reschedule``). ``propose_many`` does the same for
several ops at once (``TaskGraph.replace_ops``: each edge and shared parameter rebuilt
once), with one re-simulation; it also takes parameters' new shard stages (their
syncs' and updates' units rebuilt). The resulting times are identical to
a full simulation of the new strategy, which a property test checks task by task.
``propose_pipeline`` cuts the batch into other micro-batches: every task changes, so it
simulates the new strategy in full, keeping the current one's simulation to put back.
The re-simulation keeps a journal of the times it overwrote: ``reject`` restores the
detached tasks and those times, so it costs what the proposal changed, not the graph's
size; ``accept`` frees the detached tasks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flextui.cost.model import CostModel
from flextui.cost.optimizers import OptimizerKind
from flextui.graph import Op, OpGraph
from flextui.machine import Cluster
from flextui.sim.memory import MemoryPolicy, MemoryTracker, memory_penalty_s
from flextui.sim.schedule import Times, reschedule, schedule, undo
from flextui.sim.simulator import Simulator
from flextui.sim.taskgraph import Change, TaskGraph
from flextui.sim.timeline import Timeline, build_timeline
from flextui.strategy import ParallelConfig, ShardStage, Strategy
from flextui.strategy.pipeline import Pipeline, micro_refusal
from flextui.strategy.shards import stage_refusal


class DeltaSimulator:
    """Holds a current strategy and its simulation; see the module docstring."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 training: bool = True, memory: MemoryPolicy | str = MemoryPolicy.PENALIZE,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> None:
        self.simulator = Simulator(graph, cluster, cost_model, training, memory, optimizer)
        self.graph, self.cluster = graph, cluster
        self._pending: tuple | None = None

    def reset(self, strategy: Strategy) -> float:
        """Simulate ``strategy`` in full and make it current; return its cost (s)."""
        self._simulate(strategy)
        self._pending = None
        return self.cost

    def _simulate(self, strategy: Strategy) -> None:
        self.tg: TaskGraph = self.simulator.task_graph(strategy)
        self.times: Times = schedule(self.tg)
        self.memory = MemoryTracker(self.tg, self.simulator.optimizer)
        self.strategy = strategy
        self.cut_short = False   # the last proposal's simulation stopped at its limit
        self.makespan = max((self.times.end[t] for t in self.tg.live_ids()), default=0.0)

    @property
    def cost(self) -> float:
        """Makespan plus the memory penalty of the current (or proposed) strategy."""
        return self.makespan + memory_penalty_s(self.memory.usage(), self.simulator.memory)

    def propose(self, op: Op | str, config: ParallelConfig, limit: float = math.inf,
                deadline: float = math.inf) -> float:
        """Simulate the current strategy with ``op``'s config replaced; return its cost.
        Call ``accept`` or ``reject`` before the next proposal."""
        return self.propose_many([(op, config)], limit, deadline)

    def propose_many(self, changes: Sequence[tuple[Op | str, ParallelConfig]],
                     limit: float = math.inf, deadline: float = math.inf,
                     stages: Mapping[str, ShardStage] | None = None) -> float:
        """Simulate the current strategy with every listed op's config replaced (in
        order; a later entry for the same op wins) and every parameter in ``stages``
        given its shard stage; return its cost. Once the makespan
        provably exceeds ``limit`` (s) the simulation stops: ``cut_short`` is then true,
        the cost returned is only a lower bound, and the proposal can only be rejected.
        Once ``time.monotonic()`` passes ``deadline`` the proposal is abandoned: the
        simulator is left as it was and TimeoutError raised (a search's time budget)."""
        if self._pending is not None:
            raise RuntimeError("accept() or reject() the previous proposal first")
        if not changes and not stages:
            raise ValueError("propose_many needs at least one (op, config) or stage")
        for name, stage in (stages or {}).items():
            if name not in self.graph.parameters:
                raise ValueError(f"graph {self.graph.name!r} has no parameter {name!r}")
            refusal = stage_refusal(name, stage, name in self.graph.shared_parameters)
            if refusal:
                raise ValueError(refusal)
        resolved = []
        for op, config in changes:
            # the op as the current task graph computes it (bf16: its view's)
            op = self.tg.graph.op(op if isinstance(op, str) else op.name)
            config.check(op, self.cluster.num_devices)
            refusal = micro_refusal(op, config, self.strategy.pipeline.microbatches)
            if refusal:
                raise ValueError(refusal)
            resolved.append((op, config))
        tg, times = self.tg, self.times
        saved = self.makespan
        change = tg.replace_ops(resolved, deadline, stages)
        self._account(change, +1)
        t0 = tg.store.earliest_ready(times.ready, times.end, change.added, change.removed)
        try:
            self.makespan = reschedule(tg, times, t0, change.added, change.removed, limit,
                                       deadline, journal=True)
        except TimeoutError:
            self._account(change, -1)
            tg.rollback(change)
            undo(tg, times)
            self.makespan = saved
            raise
        self.cut_short = self.makespan > limit
        self._pending = (change, saved)
        return self.cost

    def propose_pipeline(self, pipeline: Pipeline) -> float:
        """Simulate the current strategy cut into ``pipeline``'s micro-batches (in full:
        every task changes); return its cost. Call ``accept`` or ``reject`` next;
        ``reject`` puts the current simulation back as it was. A StrategyError when a
        current config does not split the micro-batches."""
        if self._pending is not None:
            raise RuntimeError("accept() or reject() the previous proposal first")
        kept = _Kept(self.tg, self.times, self.memory, self.strategy, self.makespan)
        self._simulate(self.strategy.with_pipeline(pipeline))
        self._pending = (kept, kept.makespan)
        return self.cost

    def accept(self) -> None:
        if self.cut_short:
            raise RuntimeError("a proposal whose simulation was cut short cannot be accepted")
        change, _ = self._take()
        if isinstance(change, _Kept):   # a pipeline: the new simulation stands
            return
        self.tg.commit(change)
        self.tg.store.forget()
        self.strategy = self.strategy.replace_all(
            {self.graph.ops[i].name: self.tg.configs[i] for i in change.ops}).with_shards(
            {name: self.tg.stages.get(name, ShardStage.NONE) for name in change.stages})

    def reject(self) -> None:
        change, makespan = self._take()
        if isinstance(change, _Kept):   # a pipeline: the set-aside simulation is back
            self.tg, self.times, self.memory = change.tg, change.times, change.memory
            self.strategy = change.strategy
        else:
            self._account(change, -1)
            self.tg.rollback(change)
            undo(self.tg, self.times)
        self.makespan, self.cut_short = makespan, False

    def timeline(self) -> Timeline:
        """The full Timeline of the current (or proposed) strategy."""
        usage = self.memory.usage()
        return build_timeline(self.tg, self.times, usage,
                              memory_penalty_s(usage, self.simulator.memory))

    def _take(self) -> tuple:
        if self._pending is None:
            raise RuntimeError("no proposal to accept or reject")
        pending, self._pending = self._pending, None
        return pending

    def _account(self, change: Change, sign: int) -> None:
        """Move the memory held by the change's tasks and shards (sign -1 undoes)."""
        self.memory.tasks(change.removed, -sign)
        self.memory.tasks(change.added, sign)
        for name, old in change.param_shards.items():
            new = self.tg.param_shards[name]
            self.memory.shards(old, new) if sign > 0 else self.memory.shards(new, old)


@dataclass(frozen=True)
class _Kept:
    """The simulation a pipeline proposal set aside, to put back on ``reject``."""

    tg: TaskGraph
    times: Times
    memory: MemoryTracker
    strategy: Strategy
    makespan: float
