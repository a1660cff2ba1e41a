"""Exhaustive search: the true optimum by brute force on tiny graphs, and the
branch-and-bound lower bound never above the cost of any completion."""

import itertools
import math
import random

import pytest
from conftest import TEST_SPEC as SPEC
from conftest import line_cluster

from flextui.cost import AnalyticCostModel, OpCost
from flextui.errors import ClusterError, FlextuiError, StrategyError
from flextui.graph import GraphBuilder
from flextui.machine import Cluster, Device, DeviceSpec, Link
from flextui.search.bound import BoundTables, lower_bound
from flextui.search.exhaustive import (
    ExhaustiveResult,
    exhaustive_search,
    search_order,
    space_size,
)
from flextui.sim import Simulator
from flextui.strategy import ParallelConfig, Strategy, count_configs, valid_configs

SMALL = DeviceSpec("small", 3000, {"float32": 1e12}, 1e12)


class SizedCost:
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

    def update_s(self, nbytes, device):
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
                    checked += 1
    assert checked > 300


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


def test_search_order_is_topological_and_groups_shared_parameters():
    graph = rnn()
    order = search_order(graph)
    assert sorted(order) == list(range(len(graph.ops)))
    position = {i: k for k, i in enumerate(order)}
    for op in graph.ops:
        for p in graph.predecessors(op):
            assert position[p.index] < position[op.index]
    names = [graph.ops[i].name for i in order]
    # both embeddings before either LSTM step, the two LSTM steps next to each other
    assert max(names.index("s0.emb"), names.index("s1.emb")) < names.index("s0.lstm")
    assert names.index("s1.lstm") == names.index("s0.lstm") + 1
    assert search_order(chain()) == list(range(len(chain().ops)))


def test_any_order_finds_the_same_optimum():
    graph, cluster, cost_model = conv(), line(2), SizedCost()
    optimum = brute_force(graph, cluster, cost_model)
    names = [op.name for op in graph.ops]
    for order in (names[::-1], names[2:] + names[:2]):
        check(exhaustive_search(graph, cluster, cost_model, order=order), graph, cluster,
              cost_model, optimum)
    with pytest.raises(FlextuiError):
        exhaustive_search(graph, cluster, cost_model, order=names[1:])
