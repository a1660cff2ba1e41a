"""Exhaustive search with branch and bound, for small graphs (FlexFlow paper 8.3).

Depth-first over the ops (by default the graph inputs last and the ops sharing a
parameter together; see ``search_order``); each op takes every config of
``valid_configs`` (the space the MCMC search walks), the configs of a node's children
tried best bound first. A child is pruned when a lower bound on the simulated cost of
*every* completion of its partial assignment is no better than the best strategy
found so far, so the search returns the true optimum of the space: the minimum of
``Simulator(...).simulate(s).cost`` (memory penalty included). Leaves are simulated
with the delta simulator (identical to full simulation; consecutive leaves of a
depth-first walk differ in few ops). The first bound to beat is the best of the
built-in strategies, every op on one device, and ``upper_bound``, each improved by
coordinate descent.

The lower bound
---------------

The scheduler is FIFO list scheduling, which has anomalies (adding tasks can reorder
others and make some finish *earlier*), so simulating the assigned part is no bound.
Every bound below holds for *any* schedule that respects the task graph's dependencies
and runs one task at a time on each device and each link (an all-reduce holds all the
links of its ring), which every simulated schedule does. They hold for any partial
assignment, not only a prefix of the search order.

1. Critical paths (``tables``). A task starts no earlier than its predecessors end (a
   transfer chain adds its hops' durations), so the end of a task is at least the
   longest dependency path into it. ``E[v][c, k]`` bounds the end of forward task
   ``k`` of op ``v`` in config ``c``: its duration plus, over the producers, the
   largest of: the least over the producer's possible configs (the assigned one, or
   all) of the largest ``E`` of a producer task it reads plus that transfer. By
   induction over the topological order this holds for every completion: the
   producer's actual config is among those minimised over, and its ``E`` is a lower
   bound by hypothesis. ``B[v][c, k]`` bounds the end of backward task ``k`` likewise
   (after forward task ``k`` and after the consumers' backward tasks that send it
   gradients), in reverse topological order. ``R[v][c, k]`` bounds what must still
   follow backward task ``k``: the gradient transfers, the producers' backward tasks
   and their own ``R``, and the all-reduce and optimizer updates of the parameter
   shards it wrote (once every user of the parameter is assigned, so its replica
   groups are known; else nothing). The makespan is at least ``B + R`` of every task;
   for an unassigned op, at least the least over its configs of the largest ``B + R``
   over its tasks.

2. Tasks (``task_bound``, ``schedule_bound``). The *certain* tasks, those every completion
   has alike (the tasks of the assigned ops, the transfers between them, the
   all-reduces and updates of parameters whose users are all assigned), form a task
   graph of which every completion's schedule, cut down to them, is a schedule. Each
   gets a head (a lower bound on its start: ``E``/``B`` less its duration) and a tail
   (on the time from its end to the end: from ``R``), raised along its dependencies,
   and by its ancestors on each device: they all end before it starts and run there
   one at a time, none before its head, so for every ``h`` it starts no earlier than
   ``h`` + the durations of those with a head of at least ``h`` (tails likewise, by
   descendants). The makespan is at least head + duration + tail of every task; on
   each device and link, for any subset of its tasks, the least head + their durations
   + the least tail; and (the compute of the certain tasks + for each unassigned op
   the least total compute of any of its configs) divided by the device count.
   Gradient buckets (``sim.buckets``): a replica group under the bucket limit may share
   an all-reduce with groups of parameters not yet assigned, so its task here takes its
   own all-reduce's time (a bucket sums at least its bytes, and starts after its
   gradients) but holds no link (the bucket's one task is on the links, not one per
   group); one group per bucket of the completion would else be counted in full. A
   unit's update on a device takes the sum of its parameters' there, so each
   parameter's update here is a part of it.

3. Memory. Every term of a device's memory (parameter shards, which only grow as users
   are added; activations kept; inputs received; the largest workspace) is monotone in
   the assigned ops, so the penalty of the assigned part's memory bounds the penalty of
   every completion. The bound is max(1, 2) + 3, the cost being makespan + penalty.

4. The cutoff (``schedule_bound.cannot_finish_before``). To beat the best cost, a
   completion's makespan must be below the best cost less the penalty bound. Suppose a
   schedule of the certain tasks does that: two of them that share a resource, neither
   depending on the other, run in some order, and an order that would end at or after
   that target is excluded, which adds a dependency and raises heads and tails. When
   the additions contradict (a pair fits neither way, a cycle, a head + duration + tail
   or a resource's bound at the target), no such schedule exists and the child is
   pruned: this is job-shop branch and bound's disjunctive reasoning, valid for any
   schedule.

No duration is ever over-counted and every minimum ranges over a superset of what a
completion can pick, so each relaxation only loosens the bound; property tests check
it against random completions, and the task-graph rules against the optimum of every
schedule of small random task graphs. A child is pruned when its bound is at least the
best cost plus a relative 1e-9, so float rounding of the sums never prunes a strictly
better strategy. Strategies the simulator cannot simulate (a transfer or all-reduce
between devices the cluster does not route) get an infinite bound and are skipped.

Inputs. Graph inputs have no compute, only transfers of a few hundred bytes to their
consumers, so the bound hardly tells their configs apart; their configs matter only
through the FIFO order of those small transfers. The search assigns them last and,
once only inputs remain, does not bound their children: each gets its parent's bound
(valid for every completion below it), so none is dropped and every leaf below is
simulated, which costs far less than bounding (and rarely pruning) the children.

When the time limit stops the search, ``ExhaustiveResult.bound`` is the least bound of
the subtrees not yet explored (or the best cost, if lower): the optimum lies between
it and ``cost``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from flextui.cost.model import CostModel
from flextui.errors import ClusterError, FlextuiError
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.exhaustive.tables import BoundTables
from flextui.sim import DeltaSimulator, MemoryPolicy, Simulator
from flextui.strategy import (
    Strategy,
    builtin_strategy,
    count_configs,
)
from flextui.strategy.config import replicated

TOLERANCE = 1e-9


@dataclass
class ExhaustiveResult:
    strategy: Strategy
    cost: float
    leaves: int      # complete strategies simulated
    nodes: int       # partial assignments expanded
    pruned: int      # children cut off by the bound
    complete: bool   # False if stopped by the time limit (strategy/cost: best found)
    elapsed: float
    bound: float = math.nan  # a proven lower bound on the optimum: == cost when complete


def space_size(graph: OpGraph, num_devices: int) -> int:
    """The number of strategies: the product over ops of their valid configs."""
    return math.prod(count_configs(op, num_devices) for op in graph.ops)


class _Leaves:
    """Costs of complete assignments, by delta simulation from the previous leaf."""

    def __init__(self, tables: BoundTables, training: bool, memory: MemoryPolicy) -> None:
        self.t = tables
        self.delta = DeltaSimulator(tables.graph, tables.cluster, tables.cost_model, training,
                                    memory)
        self.current: list[int] | None = None

    def strategy(self, a: list[int]) -> Strategy:
        return Strategy({op.name: self.t.configs[i][a[i]] for i, op in enumerate(self.t.ops)},
                        "exhaustive")

    def cost(self, a: list[int]) -> float:
        """The simulated cost of the complete assignment ``a``: the previous leaf's
        simulation with the ops that differ changed one at a time (each step must be
        a strategy the simulator can route), else a fresh simulation."""
        cur = self.current
        changed = [] if cur is None else [i for i, (x, y) in enumerate(zip(a, cur)) if x != y]
        if cur is not None and len(changed) <= max(2, self.t.n // 3):
            cur = list(cur)
            for i in changed:
                if not self.t.feasible(cur, i, a[i]):
                    break
                cur[i] = a[i]
            else:
                cost = self.delta.cost
                for i in changed:
                    cost = self.delta.propose(self.t.ops[i], self.t.configs[i][a[i]])
                    self.delta.accept()
                self.current = list(a)
                return cost
        self.current = list(a)
        return self.delta.reset(self.strategy(a))


def _initial_candidates(graph: OpGraph, cluster: Cluster,
                        upper_bound: Strategy | None) -> list[Strategy]:
    out = []
    for name in ("data-parallel", "expert", "model-parallel"):
        try:
            out.append(builtin_strategy(name, graph, cluster))
        except FlextuiError:  # a builtin that does not apply to this graph
            pass
    for d in range(cluster.num_devices):
        out.append(Strategy({op.name: replicated(op, d) for op in graph.ops}, f"device-{d}"))
    if upper_bound is not None:
        upper_bound.check(graph, cluster.num_devices)
        out.append(upper_bound)
    return out


def search_order(graph: OpGraph) -> list[int]:
    """The order the search assigns the op indices in: first the ops that are not
    graph inputs, topologically, the ops sharing a parameter close together (the
    unrolled steps of an RNN layer) so that the parameter's all-reduces and updates
    enter the bound early; then the inputs, by their first consumer. Kahn's algorithm
    (inputs counted as done), taking first the ready op with the least key, where an
    op's key is the least, over it and its descendants, of the first topological index
    among the ops it shares a parameter with (its own index when it shares none).

    Inputs come last because they weigh nothing in the bound: they have no compute,
    only a small transfer to each consumer, so their configs can rarely be told apart
    before every other op is assigned; placed earlier they would multiply every level
    below them."""
    ops = graph.ops
    inputs = [op.index for op in ops if op.type == "input"]
    first: dict[str, int] = {}
    for op in ops:
        for p in op.params:
            first.setdefault(p.name, op.index)
    rank = [min([op.index] + [first[p.name] for p in op.params]) for op in ops]
    key = rank[:]
    for op in reversed(ops):
        for s in graph.successors(op):
            key[op.index] = min(key[op.index], key[s.index])
    waiting = [sum(p.type != "input" for p in graph.predecessors(op)) for op in ops]
    ready = [(key[op.index], op.index) for op in ops
             if not waiting[op.index] and op.type != "input"]
    order = []
    while ready:
        ready.sort()
        _, i = ready.pop(0)
        order.append(i)
        for s in graph.successors(ops[i]):
            waiting[s.index] -= 1
            if not waiting[s.index]:
                ready.append((key[s.index], s.index))
    position = {i: n for n, i in enumerate(order)}
    consumer = {i: min((position[s.index] for s in graph.successors(ops[i])), default=len(ops))
                for i in inputs}
    return order + sorted(inputs, key=lambda i: (consumer[i], i))


def _descend(t: BoundTables, delta: DeltaSimulator, a: list[int], order: list[int],
             deadline: float) -> tuple[float, list[int]]:
    """Coordinate descent from ``a``: give each op in turn its best config with the
    others fixed, until a sweep improves nothing (a cheap, better starting bound)."""
    cost = delta.reset(Strategy({op.name: t.configs[i][a[i]] for i, op in enumerate(t.ops)}))
    a = list(a)
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for i in order:
            best_c, best_cost = a[i], cost
            for c, config in enumerate(t.configs[i]):
                if c == a[i] or not t.feasible(a, i, c):
                    continue
                x = delta.propose(t.ops[i], config)
                delta.reject()
                if x < best_cost:
                    best_c, best_cost = c, x
            if best_c != a[i]:
                cost = delta.propose(t.ops[i], t.configs[i][best_c])
                delta.accept()
                a[i] = best_c
                improved = True
    return cost, a


def exhaustive_search(graph: OpGraph, cluster: Cluster, cost_model: CostModel, *,
                      training: bool = True, memory: MemoryPolicy | str = MemoryPolicy.PENALIZE,
                      upper_bound: Strategy | None = None,
                      time_limit: float | None = None,
                      order: Sequence[str] | None = None) -> ExhaustiveResult:
    """The strategy of least simulated cost over the whole space of valid configs,
    by depth-first branch and bound (see the module docstring). With ``time_limit``
    (seconds) it may stop early: ``complete`` is then False, ``strategy`` and ``cost``
    are the best found and ``tables`` a proven lower bound on the optimum.

    The first bound to beat is the best of the built-in strategies (data parallel,
    expert, model parallel), every op on one device, and ``upper_bound`` (e.g. what an
    MCMC search found), each improved by coordinate descent (for at most a tenth of
    the time limit). ``order`` (op names, every op once) replaces ``search_order``'s
    order of the ops; any order gives the same optimum, but the time to prove it
    depends on the order a lot."""
    start = time.perf_counter()
    deadline = math.inf if time_limit is None else start + time_limit
    t = BoundTables(graph, cluster, cost_model, training, MemoryPolicy(memory))
    if order is None:
        indices = search_order(graph)
    else:
        names = list(order)
        if sorted(names) != sorted(op.name for op in graph.ops):
            raise FlextuiError(f"search order: name every op of graph {graph.name!r} exactly once")
        indices = [graph.op(name).index for name in names]
    descent_deadline = start + 0.1 * time_limit if time_limit is not None else math.inf
    best_cost, best_a = _first_bound(t, upper_bound, indices, descent_deadline)
    search = _Search(t, indices, best_cost, best_a, deadline)
    root = t.bound([-1] * t.n) if t.n else 0.0
    if t.n and root < search.cutoff():
        search.visit(0)
    if search.stopped:
        # every strategy not yet ruled out lies below a child not yet (fully) explored
        unexplored = ([lb for children, j in search.frames for lb, _ in children[j:]]
                      if search.frames else [root])
        bound = min([search.best] + unexplored)
    else:
        bound = search.best
    return ExhaustiveResult(search.leaves.strategy(search.best_a), search.best,
                            search.stats["leaves"], search.stats["nodes"],
                            search.stats["pruned"], not search.stopped,
                            time.perf_counter() - start, bound)


def _first_bound(t: BoundTables, upper_bound: Strategy | None, order: list[int],
                 deadline: float) -> tuple[float, list[int]]:
    """The best of the starting strategies, each improved by coordinate descent."""
    graph = t.graph
    index = [{c: j for j, c in enumerate(cs)} for cs in t.configs]
    simulator = Simulator(graph, t.cluster, t.cost_model, t.training, t.memory)
    starts = []
    for s in _initial_candidates(graph, t.cluster, upper_bound):
        try:
            cost = simulator.simulate(s).cost
        except ClusterError:  # needs a route the cluster lacks
            continue
        starts.append((cost, [index[i][s[op.name]] for i, op in enumerate(graph.ops)]))
    if not starts:
        raise FlextuiError(f"no starting strategy of graph {graph.name!r} can be simulated on "
                           f"cluster {t.cluster.name!r}")
    best_cost, best_a = min(starts, key=lambda x: x[0])
    delta = DeltaSimulator(graph, t.cluster, t.cost_model, t.training, t.memory)
    for _, a0 in sorted(starts, key=lambda x: x[0]):
        cost, a1 = _descend(t, delta, a0, order, deadline)
        if cost < best_cost:
            best_cost, best_a = cost, a1
    return best_cost, best_a


class _Search:
    """The depth-first walk: ``visit(depth)`` gives op ``order[depth]`` each config
    whose bound is below the cutoff, best bound first."""

    def __init__(self, t: BoundTables, order: list[int], best: float, best_a: list[int],
                 deadline: float) -> None:
        self.t, self.order, self.deadline = t, order, deadline
        self.best, self.best_a = best, best_a
        self.leaves = _Leaves(t, t.training, t.memory)
        self.stats = {"nodes": 0, "leaves": 0, "pruned": 0}
        self.a = [-1] * t.n
        self.stopped = False
        self.frames: list[list] = []  # per depth: [children (bound, config), index being explored]
        self.inputs_from = len(order)  # the depth from which only inputs remain
        while self.inputs_from and t.ops[order[self.inputs_from - 1]].type == "input":
            self.inputs_from -= 1

    def cutoff(self) -> float:
        return self.best * (1 + TOLERANCE) if self.best > 0 else self.best

    def children(self, depth: int, bound: float) -> list[tuple[float, int]]:
        """The configs of op ``order[depth]`` worth exploring, with their bounds. Once
        only inputs remain, every routable config, with the parent's ``tables``: the
        bound cannot tell an input's configs apart (they differ only in a transfer of
        a few hundred bytes), and computing it costs far more than simulating."""
        t, a, k = self.t, self.a, self.order[depth]
        if depth >= self.inputs_from:
            return [(bound, c) for c in range(len(t.configs[k])) if t.feasible(a, k, c)]
        children = []
        for c in range(len(t.configs[k])):
            a[k] = c
            lb = t.bound(a, self.cutoff())
            if lb >= self.cutoff():
                self.stats["pruned"] += 1
            else:
                children.append((lb, c))
        a[k] = -1
        return sorted(children)

    def visit(self, depth: int, bound: float = 0.0) -> None:
        if time.perf_counter() > self.deadline:
            self.stopped = True
            return
        self.stats["nodes"] += 1
        k = self.order[depth]
        children = self.children(depth, bound)
        frame = [children, 0]
        self.frames.append(frame)
        for j, (lb, c) in enumerate(children):
            frame[1] = j
            if lb >= self.cutoff():
                self.stats["pruned"] += len(children) - j
                break
            self.a[k] = c
            if depth == self.t.n - 1:
                self.leaf()
            else:
                self.visit(depth + 1, lb)
            if self.stopped:
                break
        if not self.stopped:
            self.frames.pop()
        self.a[k] = -1

    def leaf(self) -> None:
        self.stats["leaves"] += 1
        cost = self.leaves.cost(self.a)
        if cost < self.best:
            self.best, self.best_a = cost, list(self.a)
