"""Exhaustive search: the true optimum by brute force on tiny graphs, and the
branch-and-bound lower bound never above the cost of any completion."""

import itertools
import math
import random

import pytest

from flextui.cost import AnalyticCostModel, CostModel, OpCost
from flextui.errors import ClusterError, FlextuiError, StrategyError
from flextui.graph import GraphBuilder
from flextui.graph.library import load_model
from flextui.machine import Cluster, Device, DeviceSpec, Link, load_named_cluster
from flextui.search.exhaustive.schedule_bound import (
    cannot_finish_before,
    one_resource,
    raise_bounds,
    topological,
)
from flextui.search.exhaustive.search import (
    ExhaustiveResult,
    exhaustive_search,
    search_order,
    space_size,
)
from flextui.search.exhaustive.tables import BoundTables, lower_bound
from flextui.sim import Simulator
from flextui.sim.taskgraph import TaskKind
from flextui.strategy import ParallelConfig, Strategy, count_configs, valid_configs
from helpers import TEST_SPEC as SPEC, line_cluster

SMALL = DeviceSpec("small", 3000, {"float32": 1e12}, 1e12)


class SizedCost(CostModel):
    """Task times that grow with the block, so splitting pays; transfers latency +
    bytes / bandwidth; updates grow with the shard."""

    identity = "sized"

    def op_cost(self, op, block_shape, device):
        if op.type == "input":
            return OpCost(0.0, 0.0)
        work = math.prod(block_shape)
        return OpCost(0.2 + 0.01 * work, 0.3 + 0.02 * work, 8 * work)

    def transfer_s(self, nbytes, link):
        return link.latency + nbytes / link.bandwidth

    def update_s(self, nbytes, device, optimizer=None):
        return 0.05 + nbytes * 1e-4


def line(n, spec=SPEC, bandwidth=200.0, latency=0.1):
    return line_cluster(n, bandwidth, latency, spec)


def star(n, spec=SPEC):
    """``n`` devices joined by a switch: every transfer takes two hops."""
    devices = [Device(i, f"d{i}", 0, spec) for i in range(n)]
    links = []
    for i in range(n):
        links.append(Link(len(links), f"d{i}->sw", "test", f"d{i}", "sw", 100.0, 0.05))
        links.append(Link(len(links), f"sw->d{i}", "test", "sw", f"d{i}", 300.0, 0.1))
    return Cluster(f"star{n}", devices, links, switches=["sw"])


def chain():
    g = GraphBuilder("chain")
    h = g.relu(g.linear(g.input((8, 16), name="x"), 16, name="fc"), name="act")
    g.linear(h, 4, name="fc2")
    return g.build()


def conv():
    g = GraphBuilder("conv")
    x = g.conv2d(g.input((4, 2, 6, 6), name="x"), 4, kernel=3, padding=1, name="conv")
    g.linear(g.flatten(g.pool2d(x, 2, name="pool"), name="flat"), 4, name="fc")
    return g.build()


def rnn():
    """Two unrolled steps sharing the embedding and the LSTM weights."""
    g = GraphBuilder("rnn")
    state = None
    for step in range(2):
        with g.scope(f"s{step}"):
            e = g.embedding(g.input((4,), dtype="int64", name="ids"), 10, 8, name="emb", shared="emb")
            state = g.lstm_cell(e, state, 8, name="lstm", shared="lstm")
    return g.build()


def branch():
    g = GraphBuilder("branch")
    x = g.input((4, 8), name="x")
    s = g.add_(g.linear(x, 8, name="a"), g.relu(x, name="b"), name="sum")
    g.binary(s, s, "mul", name="sq")  # one tensor read twice
    return g.build()


GRAPHS = {"chain": chain, "conv": conv, "rnn": rnn, "branch": branch}


def brute_force(graph, cluster, cost_model, training=True, memory="penalize"):
    sim = Simulator(graph, cluster, cost_model, training, memory)
    best = math.inf
    for combo in itertools.product(*(list(valid_configs(op, cluster.num_devices)) for op in graph.ops)):
        try:
            cost = sim.simulate(Strategy(dict(zip((op.name for op in graph.ops), combo)))).cost
        except ClusterError:  # a route the cluster lacks
            cost = math.inf
        best = min(best, cost)
    return best


def check(result: ExhaustiveResult, graph, cluster, cost_model, optimum, training=True,
          memory="penalize"):
    assert result.complete
    assert result.cost == pytest.approx(optimum, rel=1e-12, abs=1e-15)
    simulated = Simulator(graph, cluster, cost_model, training, memory).simulate(result.strategy).cost
    assert simulated == pytest.approx(result.cost, rel=1e-12, abs=1e-15)
    assert result.bound == result.cost
    assert result.nodes >= 1 and result.leaves >= 0 and result.pruned >= 0


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("cost_model", [SizedCost(), AnalyticCostModel()], ids=["sized", "analytic"])
def test_matches_brute_force(name, cost_model):
    graph, cluster = GRAPHS[name](), line(2)
    optimum = brute_force(graph, cluster, cost_model)
    check(exhaustive_search(graph, cluster, cost_model), graph, cluster, cost_model, optimum)


@pytest.mark.parametrize("name", ["chain", "branch"])
def test_matches_brute_force_inference(name):
    graph, cluster, cost_model = GRAPHS[name](), line(2), SizedCost()
    optimum = brute_force(graph, cluster, cost_model, training=False)
    check(exhaustive_search(graph, cluster, cost_model, training=False), graph, cluster,
          cost_model, optimum, training=False)


@pytest.mark.parametrize("cluster", [star(3), line(3)], ids=["star3", "line3"])
def test_multi_hop_routes_and_missing_routes(cluster):
    """Three devices: two-hop routes through a switch, or no route between the ends
    of a line (strategies the simulator cannot simulate are skipped)."""
    graph, cost_model = chain(), SizedCost()
    optimum = brute_force(graph, cluster, cost_model)
    check(exhaustive_search(graph, cluster, cost_model), graph, cluster, cost_model, optimum)


@pytest.mark.parametrize("memory", ["penalize", "reject"])
def test_memory_policies(memory):
    """Devices so small that most strategies are over capacity."""
    graph, cost_model = chain(), SizedCost()
    cluster = line(2, spec=DeviceSpec("small", 9000, {"float32": 1e12}, 1e12))
    optimum = brute_force(graph, cluster, cost_model, memory=memory)
    assert 0 < optimum < math.inf
    result = exhaustive_search(graph, cluster, cost_model, memory=memory)
    check(result, graph, cluster, cost_model, optimum, memory=memory)


def test_bound_never_exceeds_any_completion():
    """Random partial assignments (any subset of ops, not just a prefix) against random
    completions, on every tiny graph, cluster shape, cost model and mode."""
    rng = random.Random(7)
    clusters = [line(2), star(3), line(2, spec=SMALL)]
    checked = 0
    for name, make in sorted(GRAPHS.items()):
        graph = make()
        for cluster, cost_model, training in itertools.product(
                clusters, [SizedCost(), AnalyticCostModel()], [True, False]):
            sim = Simulator(graph, cluster, cost_model, training)
            tables = BoundTables(graph, cluster, cost_model, training, "penalize")
            for _ in range(6):
                a = [rng.randrange(len(cs)) if rng.random() < 0.5 else -1 for cs in tables.configs]
                bound = tables.bound(a)
                for _ in range(3):
                    full = [c if c >= 0 else rng.randrange(len(cs))
                            for c, cs in zip(a, tables.configs)]
                    strategy = Strategy({op.name: tables.configs[i][full[i]]
                                         for i, op in enumerate(graph.ops)})
                    cost = sim.simulate(strategy).cost
                    assert bound <= cost * (1 + 1e-12), (name, cluster.name, a, full)
                    assert tables.bound(full) <= cost * (1 + 1e-12)
                    # with a cutoff near the cost, the disjunctive proof is tried too
                    cutoff = cost * rng.uniform(0.9, 1.1)
                    assert tables.bound(a, cutoff) <= cost * (1 + 1e-12), (name, a, full, cutoff)
                    checked += 1
    assert checked > 300


def test_bound_never_exceeds_completions_of_larger_models():
    """rnnlm2 and LeNet on 4 GPUs (shared parameters, all-reduces, several transfers a
    task), with the cutoff set just above the cost so the disjunctive proof works hard."""
    rng = random.Random(11)
    cluster, cost_model = load_named_cluster("p100-4x4", nodes=1), AnalyticCostModel()
    for name in ("rnnlm2", "lenet"):
        graph = load_model(name)
        tables = BoundTables(graph, cluster, cost_model, True, "penalize")
        sim = Simulator(graph, cluster, cost_model)
        for _ in range(8):
            full = [rng.randrange(len(cs)) for cs in tables.configs]
            cost = sim.simulate(Strategy({op.name: tables.configs[i][full[i]]
                                          for i, op in enumerate(graph.ops)})).cost
            a = [c if rng.random() < 0.7 else -1 for c in full]
            for cutoff in (math.inf, cost * 1.001, cost * 1.05):
                assert tables.bound(a, cutoff) <= cost * (1 + 1e-12), (name, a, full, cutoff)


def test_certain_tasks_of_a_complete_assignment_are_the_simulated_ones():
    """Per device the tasks the bound reasons about take exactly the busy time the
    simulator reports; per link, their transfers exactly the simulated transfers' time,
    and their all-reduces no more than the simulated buckets' (a group small enough to
    share a bucket holds no link in the bound)."""
    rng = random.Random(5)
    cluster, cost_model = load_named_cluster("p100-4x4", nodes=1), AnalyticCostModel()
    graph = load_model("rnnlm2")
    tables = BoundTables(graph, cluster, cost_model, True, "penalize")
    sim = Simulator(graph, cluster, cost_model)
    link_names = [link.name for link in cluster.links]
    for _ in range(5):
        a = [rng.randrange(len(cs)) for cs in tables.configs]
        timeline = sim.simulate(Strategy({op.name: tables.configs[i][a[i]]
                                          for i, op in enumerate(graph.ops)}))
        tasks = tables.task_bound.tasks(a)
        busy = [0.0] * tables.D
        moving = [0.0] * tables.L
        for dur, res in zip(tasks.dur, tasks.res):
            for r in res:
                if r < tables.D:
                    busy[r] += dur
                else:
                    moving[r - tables.D] += dur
        assert busy == pytest.approx([d.busy_s for d in timeline.devices], rel=1e-12, abs=1e-18)
        summing = [0.0] * tables.L
        for t in timeline.tasks:
            if t.kind == TaskKind.SYNC:
                for name in t.resources:
                    if name in link_names:
                        summing[link_names.index(name)] += t.end - t.start
        transfers = [link.busy_s - s for link, s in zip(timeline.links, summing)]
        assert all(m <= t + s + 1e-12 for m, t, s in zip(moving, transfers, summing))
        assert sum(moving) >= sum(transfers) - 1e-12


def optimal_makespan(dur, res, preds, head, tail):
    """Brute force over every order of the tasks: each starts as early as its
    predecessors, its head and its resources (after the tasks before it there) allow;
    the best over the orders is the optimum of all schedules."""
    best = math.inf
    for perm in itertools.permutations(range(len(dur))):
        pos = {x: i for i, x in enumerate(perm)}
        if any(pos[p] > pos[x] for x in perm for p in preds[x]):
            continue
        end, free, span = {}, {}, 0.0
        for x in perm:
            start = max([head[x]] + [end[p] for p in preds[x]] + [free.get(r, 0.0) for r in res[x]])
            end[x] = start + dur[x]
            for r in res[x]:
                free[r] = end[x]
            span = max(span, end[x] + tail[x])
        best = min(best, span)
    return best


def test_schedule_bounds_hold_for_every_schedule():
    """Random task graphs of 6 tasks on 3 resources (the first 2 devices; some tasks
    hold two resources), with heads and tails: the raised bounds, the one-resource
    bounds and the disjunctive proof never claim more than the best of all schedules."""
    rng = random.Random(3)
    proved = 0
    for _ in range(120):
        n = 6
        dur = [rng.choice([0.0, 1.0, 2.0, 3.0, 5.0]) for _ in range(n)]
        res = [tuple(sorted(rng.sample(range(3), 2))) if rng.random() < 0.15 else (rng.randrange(3),)
               for _ in range(n)]
        preds = [[p for p in range(x) if rng.random() < 0.3] for x in range(n)]
        head = [rng.choice([0.0, 0.0, 1.0, 4.0]) for _ in range(n)]
        tail = [rng.choice([0.0, 0.0, 2.0, 3.0]) for _ in range(n)]
        optimum = optimal_makespan(dur, res, preds, head, tail)
        succs = [[x for x in range(n) if p in preds[x]] for p in range(n)]
        order = topological(preds, succs)
        h, q = head[:], tail[:]
        raise_bounds(order, preds, dur, res, h, 2)
        raise_bounds(order[::-1], succs, dur, res, q, 2)
        assert max(a + d + b for a, d, b in zip(h, dur, q)) <= optimum + 1e-9
        for r in range(3):
            items = [(h[x], dur[x], q[x]) for x in range(n) if r in res[x]]
            assert not items or one_resource(items) <= optimum + 1e-9
        assert not cannot_finish_before(optimum + 1e-6, dur, res, preds, head[:], tail[:], 2, 3)
        proved += cannot_finish_before(optimum, dur, res, preds, head[:], tail[:], 2, 3)
    assert proved > 20  # the proof does find the optimum's lower bound often


def test_bound_is_tight_on_one_device():
    """Every op on one device: the device runs everything back to back, so the bound
    of the complete assignment is the simulated cost."""
    graph, cluster, cost_model = chain(), line(2), SizedCost()
    strategy = Strategy({op.name: ParallelConfig((1,) * len(op.space), (0,)) for op in graph.ops})
    cost = Simulator(graph, cluster, cost_model).simulate(strategy).cost
    assert lower_bound(graph, cluster, cost_model, dict(strategy)) == pytest.approx(cost, rel=1e-12)
    assert lower_bound(graph, cluster, cost_model, {}) <= cost


def test_time_limit_returns_best_found():
    graph, cluster, cost_model = conv(), line(2), SizedCost()
    result = exhaustive_search(graph, cluster, cost_model, time_limit=0.0)
    assert not result.complete
    simulated = Simulator(graph, cluster, cost_model).simulate(result.strategy).cost
    assert simulated == pytest.approx(result.cost, rel=1e-12)
    optimum = brute_force(graph, cluster, cost_model)
    assert result.bound <= optimum * (1 + 1e-12) <= result.cost * (1 + 1e-12)


def test_upper_bound_argument():
    graph, cluster, cost_model = branch(), line(2), SizedCost()
    full = exhaustive_search(graph, cluster, cost_model)
    again = exhaustive_search(graph, cluster, cost_model, upper_bound=full.strategy)
    check(again, graph, cluster, cost_model, full.cost)
    assert again.leaves <= full.leaves
    bad = Strategy({op.name: ParallelConfig((1,) * len(op.space), (5,)) for op in graph.ops})
    with pytest.raises(StrategyError):
        exhaustive_search(graph, cluster, cost_model, upper_bound=bad)


def test_space_size():
    for make in GRAPHS.values():
        graph = make()
        for n in (1, 2, 3):
            size = space_size(graph, n)
            assert size == math.prod(count_configs(op, n) for op in graph.ops)
            assert size == math.prod(len(list(valid_configs(op, n))) for op in graph.ops)


def test_search_order_groups_shared_parameters_and_puts_inputs_last():
    graph = rnn()
    order = search_order(graph)
    assert sorted(order) == list(range(len(graph.ops)))
    position = {i: k for k, i in enumerate(order)}
    inputs = {op.index for op in graph.ops if op.type == "input"}
    assert sorted(position[i] for i in inputs) == list(range(len(order) - len(inputs), len(order)))
    for op in graph.ops:
        for p in graph.predecessors(op):
            assert p.index in inputs or position[p.index] < position[op.index]
    names = [graph.ops[i].name for i in order]
    # both embeddings before either LSTM step, the two LSTM steps next to each other
    assert max(names.index("s0.emb"), names.index("s1.emb")) < names.index("s0.lstm")
    assert names.index("s1.lstm") == names.index("s0.lstm") + 1
    assert names[-2:] == ["s0.ids", "s1.ids"]
    line = chain()
    assert [line.ops[i].name for i in search_order(line)] == ["fc", "act", "fc2", "x"]


def test_any_order_finds_the_same_optimum():
    graph, cluster, cost_model = conv(), line(2), SizedCost()
    optimum = brute_force(graph, cluster, cost_model)
    names = [op.name for op in graph.ops]
    for order in (names[::-1], names[2:] + names[:2]):
        check(exhaustive_search(graph, cluster, cost_model, order=order), graph, cluster,
              cost_model, optimum)
    with pytest.raises(FlextuiError):
        exhaustive_search(graph, cluster, cost_model, order=names[1:])
