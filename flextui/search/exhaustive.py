"""Exhaustive search with branch and bound, for small graphs (FlexFlow paper 8.3).

Depth-first over the ops (in a topological order, by default one that assigns the
ops sharing a parameter together; see ``search_order``); each op takes every config
of ``valid_configs`` (the space the MCMC search walks), the configs of a node's
children tried best bound first. A child is pruned when a lower bound on the simulated
cost of *every* completion of its partial assignment is no better than the best
strategy found so far, so the search returns the true optimum of the space: the
minimum of ``Simulator(...).simulate(s).cost`` (memory penalty included). Leaves are
simulated with the delta simulator (identical to full simulation; consecutive leaves
of a depth-first walk differ in few ops). The first bound to beat is the best of the
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

1. Critical paths. A task starts no earlier than its predecessors end (a transfer
   chain adds its hops' durations), so the end of a task is at least the longest
   dependency path into it. ``E[v][c, k]`` bounds the end of forward task ``k`` of
   op ``v`` in config ``c``: its duration plus, over the producers, the largest of:
   the least over the producer's possible configs (the assigned one, or all) of the
   largest ``E`` of a producer task it reads plus that transfer. By induction over the
   topological order this holds for every completion: the producer's actual config is
   among those minimised over, and its ``E`` is a lower bound by hypothesis.
   ``B[v][c, k]`` bounds the end of backward task ``k`` likewise (after forward task
   ``k`` and after the consumers' backward tasks that send it gradients), in reverse
   topological order. ``R[v][c, k]`` bounds what must still follow backward task ``k``:
   the gradient transfers, the producers' backward tasks and their own ``R``, and the
   all-reduce and optimizer updates of the parameter shards it wrote (once every user
   of the parameter is assigned, so its replica groups are known; else nothing). The
   makespan is at least ``B + R`` of every task; for an unassigned op, at least the
   least over its configs of the largest ``B + R`` over its tasks.

2. Resources. Each item a device or link must run (the tasks of assigned ops, the
   transfers between assigned ops, the all-reduces and updates of parameters whose
   users are all assigned) has a head (the earliest it can start: ``E``/``B`` less its
   duration, or its producers' bounds), its duration, and a tail (what must follow it,
   from ``R``). The items of any subset run one at a time from the earliest head on,
   and the last to end is followed by its tail; so for every resource and every ``h``
   the makespan is at least ``h`` + the durations of the items with a head of at least
   ``h`` + the least tail among them. And all compute shares the devices: the makespan
   is at least (the assigned compute and known updates + for each unassigned op the
   least total compute of any of its configs) divided by the device count.

3. Memory. Every term of a device's memory (parameter shards, which only grow as users
   are added; activations kept; inputs received; the largest workspace) is monotone in
   the assigned ops, so the penalty of the assigned part's memory bounds the penalty of
   every completion. The bound is max(1, 2) + 3, the cost being makespan + penalty.

No duration is ever over-counted and every minimum ranges over a superset of what a
completion can pick, so each relaxation only loosens the bound; a property test checks
it against random completions. A child is pruned when its bound is at least the best
cost plus a relative 1e-9, so float rounding of the sums never prunes a strictly better
strategy. Strategies the simulator cannot simulate (a transfer or all-reduce between
devices the cluster does not route) get an infinite bound and are skipped.

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
from flextui.search.bound import BoundTables
from flextui.sim import DeltaSimulator, Simulator
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

    def __init__(self, tables: BoundTables, training: bool, memory: str) -> None:
        self.t = tables
        self.delta = DeltaSimulator(tables.graph, tables.cluster, tables.cost_model, training, memory)
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


def _initial_candidates(graph: OpGraph, cluster: Cluster, upper_bound: Strategy | None) -> list[Strategy]:
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
    """A topological order of the op indices that assigns the ops sharing a parameter
    close together (the unrolled steps of an RNN layer), so that the parameter's
    all-reduces and updates enter the bound early: Kahn's algorithm, taking first the
    ready op with the least key, where an op's key is the least, over it and its
    descendants, of the first topological index among the ops it shares a parameter
    with (its own index when it shares none). Without shared parameters this is the
    graph's own order."""
    ops = graph.ops
    first: dict[str, int] = {}
    for op in ops:
        for p in op.params:
            first.setdefault(p.name, op.index)
    rank = [min([op.index] + [first[p.name] for p in op.params]) for op in ops]
    key = rank[:]
    for op in reversed(ops):
        for s in graph.successors(op):
            key[op.index] = min(key[op.index], key[s.index])
    waiting = [len(graph.predecessors(op)) for op in ops]
    ready = [(key[op.index], op.index) for op in ops if not waiting[op.index]]
    order = []
    while ready:
        ready.sort()
        _, i = ready.pop(0)
        order.append(i)
        for s in graph.successors(ops[i]):
            waiting[s.index] -= 1
            if not waiting[s.index]:
                ready.append((key[s.index], s.index))
    return order


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
                      training: bool = True, memory: str = "penalize",
                      upper_bound: Strategy | None = None,
                      time_limit: float | None = None,
                      order: Sequence[str] | None = None) -> ExhaustiveResult:
    """The strategy of least simulated cost over the whole space of valid configs,
    by depth-first branch and bound (see the module docstring). With ``time_limit``
    (seconds) it may stop early: ``complete`` is then False, ``strategy`` and ``cost``
    are the best found and ``bound`` a proven lower bound on the optimum.

    The first bound to beat is the best of the built-in strategies (data parallel,
    expert, model parallel), every op on one device, and ``upper_bound`` (e.g. what an
    MCMC search found), each improved by coordinate descent (for at most a tenth of
    the time limit). ``order`` (op names, every op once) replaces ``search_order``'s
    order of the ops; any order gives the same optimum, but the time to prove it
    depends on the order a lot."""
    start = time.perf_counter()
    deadline = math.inf if time_limit is None else start + time_limit
    t = BoundTables(graph, cluster, cost_model, training, memory)
    if order is None:
        order = search_order(graph)
    else:
        names = list(order)
        if sorted(names) != sorted(op.name for op in graph.ops):
            raise FlextuiError(f"search order: name every op of graph {graph.name!r} exactly once")
        order = [graph.op(name).index for name in names]
    index = [{c: j for j, c in enumerate(cs)} for cs in t.configs]
    simulator = Simulator(graph, cluster, cost_model, training, memory)
    starts = []
    for s in _initial_candidates(graph, cluster, upper_bound):
        try:
            cost = simulator.simulate(s).cost
        except ClusterError:  # needs a route the cluster lacks
            continue
        starts.append((cost, [index[i][s[op.name]] for i, op in enumerate(graph.ops)]))
    if not starts:
        raise FlextuiError(f"no starting strategy of graph {graph.name!r} can be simulated on "
                           f"cluster {cluster.name!r}")
    best_cost, best_a = min(starts, key=lambda x: x[0])
    delta = DeltaSimulator(graph, cluster, cost_model, training, memory)
    descent_deadline = start + 0.1 * time_limit if time_limit is not None else math.inf
    for _, a0 in sorted(starts, key=lambda x: x[0]):
        cost, a1 = _descend(t, delta, a0, order, descent_deadline)
        if cost < best_cost:
            best_cost, best_a = cost, a1
    leaves_eval = _Leaves(t, training, memory)
    stats = {"nodes": 0, "leaves": 0, "pruned": 0}
    a = [-1] * t.n
    state = {"best": best_cost, "best_a": best_a, "stopped": False}
    frames: list[list] = []   # per depth: [children (bound, config), index being explored]

    def cutoff() -> float:
        return state["best"] * (1 + TOLERANCE) if state["best"] > 0 else state["best"]

    def visit(depth: int) -> None:
        if time.perf_counter() > deadline:
            state["stopped"] = True
            return
        stats["nodes"] += 1
        k = order[depth]
        children = []
        for c in range(len(t.configs[k])):
            a[k] = c
            lb = t.bound(a)
            if lb >= cutoff():
                stats["pruned"] += 1
            else:
                children.append((lb, c))
        children.sort()
        frame = [children, 0]
        frames.append(frame)
        for j, (lb, c) in enumerate(children):
            frame[1] = j
            if lb >= cutoff():
                stats["pruned"] += len(children) - j
                break
            a[k] = c
            if depth == t.n - 1:
                stats["leaves"] += 1
                cost = leaves_eval.cost(a)
                if cost < state["best"]:
                    state["best"], state["best_a"] = cost, list(a)
            else:
                visit(depth + 1)
            if state["stopped"]:
                break
        if not state["stopped"]:
            frames.pop()
        a[k] = -1

    root = t.bound(a) if t.n else 0.0
    if t.n and root < cutoff():
        visit(0)
    if state["stopped"]:
        # every strategy not yet ruled out lies below a child not yet (fully) explored
        unexplored = [lb for children, j in frames for lb, _ in children[j:]] if frames else [root]
        bound = min([state["best"]] + unexplored)
    else:
        bound = state["best"]
    return ExhaustiveResult(leaves_eval.strategy(state["best_a"]), state["best"], stats["leaves"],
                            stats["nodes"], stats["pruned"], not state["stopped"],
                            time.perf_counter() - start, bound)
