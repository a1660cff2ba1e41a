"""Gradient buckets: the rule (``sim.buckets``) by hand, the simulated all-reduces and
updates of a bucket by hand, delta simulation when a change moves other parameters'
buckets, and the runtime's plan issuing exactly the simulated buckets."""

import pytest

from flextui.cost import AnalyticCostModel
from flextui.graph import GraphBuilder
from flextui.machine import DeviceSpec
from flextui.machine.detect import cpu_ranks
from flextui.runtime.plan import compile_plan
from flextui.sim import DeltaSimulator, Simulator, TaskKind
from flextui.sim.buckets import (
    CPU_BUCKET_BYTES,
    GPU_BUCKET_BYTES,
    bucket_starts,
    bucket_units,
    cluster_bucket_limit,
)
from flextui.strategy import ParallelConfig, builtin_strategy
from helpers import line_cluster
from runtime_models import SMALL_MODELS, STRATEGIES, small, strategy
from test_sim_full import FixedCost

CPU_RANK = DeviceSpec("cpu-rank", 2**40, {"float32": 1e12}, 1e12)


def test_consecutive_small_groups_of_one_rank_set_share_a_bucket_up_to_the_limit():
    syncs = [("A", 30), ("A", 30), ("A", 50), ("B", 10), ("B", 200), ("B", 10), ("A", 40),
             ("A", 60), ("A", 100)]
    # 30+30 fit; +50 is over; B is another rank set; 200 is over the limit, alone, and
    # closes its bucket; 40+60 fill it exactly; 100 is not under the limit
    assert bucket_starts(syncs, 100) == [True, False, True, True, True, True, True, False,
                                         True]
    assert bucket_starts([], 100) == []


def test_units_join_the_parameters_of_a_bucket_and_skip_those_with_no_all_reduce():
    params = [("p", [("A", 30)]), ("q", []), ("r", [("A", 30), ("B", 5)]), ("s", [("B", 5)]),
              ("t", [("A", 5)])]
    assert bucket_units(params, 100) == [("p", "r", "s"), ("q",), ("t",)]


def test_the_limit_is_the_runtimes_for_the_clusters_devices():
    assert cluster_bucket_limit(cpu_ranks(2)) == CPU_BUCKET_BYTES == 1 << 20
    assert cluster_bucket_limit(line_cluster(2)) == GPU_BUCKET_BYTES == 25 << 20


def two_layers(width: int):
    g = GraphBuilder("two")
    h = g.linear(g.input((4, 100), name="x"), width, bias=False, name="fc1")
    g.linear(h, 100, bias=False, name="fc2")
    return g.build()


def test_a_bucket_by_hand():
    """Data parallel on 2 devices, 1 s forward, 2 s backward, 0.5 s an update: fc1 and
    fc2's weights (2 × 400 bytes × width) under the limit are one all-reduce once fc1's
    backward ends (at 6 s), then one update per device of both (1 s)."""
    graph = two_layers(10)
    two = line_cluster(2, bandwidth=1e6, latency=0.1)
    timeline = Simulator(graph, two, FixedCost()).simulate(
        builtin_strategy("data-parallel", graph, two))
    sync, = [t for t in timeline.tasks if t.kind == TaskKind.SYNC]
    both = 2 * 100 * 10 * 4
    assert (sync.ready, sync.start, sync.nbytes) == (6.0, 6.0, both)
    # ring over 2 devices: 2(p-1)/p * bytes / bandwidth + 2(p-1) * latency
    assert sync.end - sync.start == pytest.approx(both / 1e6 + 0.2)
    updates = [t for t in timeline.tasks if t.kind == TaskKind.UPDATE]
    assert sorted((t.resources, t.start, t.end - t.start) for t in updates) == [
        (("d0",), sync.end, 1.0), (("d1",), sync.end, 1.0)]
    assert timeline.makespan == pytest.approx(6.0 + both / 1e6 + 0.2 + 1.0)
    assert timeline.bucket_params == {sync.key: ("fc2.weight", "fc1.weight")}


def test_over_the_limit_each_weight_is_summed_once_its_gradient_is_ready():
    """On CPU ranks (1 MiB) two weights of 600 kB are two all-reduces: fc2's when its
    backward ends (4 s), fc1's at 6 s; each parameter updated alone."""
    graph = two_layers(1500)
    two = line_cluster(2, bandwidth=1e9, latency=0.1, spec=CPU_RANK)
    timeline = Simulator(graph, two, FixedCost()).simulate(
        builtin_strategy("data-parallel", graph, two))
    syncs = sorted((t.ready, t.nbytes) for t in timeline.tasks if t.kind == TaskKind.SYNC)
    assert syncs == [(4.0, 600_000), (6.0, 600_000)]
    assert sum(t.kind == TaskKind.UPDATE for t in timeline.tasks) == 4
    assert timeline.bucket_params == {}


def tasks(timeline):
    return sorted((t.key, t.kind, t.resources, round(t.start, 12), round(t.end, 12), t.nbytes)
                  for t in timeline.tasks)


def test_delta_equals_full_when_a_change_moves_other_parameters_buckets():
    """Three weights of 400 kB on CPU ranks: data parallel sums fc3's and fc2's in one
    bucket and fc1's alone; with fc3 on one device (nothing to sum) fc2's and fc1's share
    one. Every proposal, rejected or accepted, simulates as the full simulation does."""
    g = GraphBuilder("three")
    h = g.linear(g.input((4, 100), name="x"), 1000, bias=False, name="fc1")
    h = g.linear(h, 100, bias=False, name="fc2")
    g.linear(h, 1000, bias=False, name="fc3")
    graph = g.build()
    two = line_cluster(2, bandwidth=1e9, latency=1e-4, spec=CPU_RANK)
    cost = AnalyticCostModel()
    full = Simulator(graph, two, cost)
    dp = builtin_strategy("data-parallel", graph, two)
    fc3 = graph.op("fc3")
    alone = ParallelConfig((1,) * len(fc3.space), (1,))
    moved = dp.replace_all({"fc3": alone})
    units = {tuple(sorted(u)) for u in full.task_graph(dp).units}
    assert units == {("fc2.weight", "fc3.weight"), ("fc1.weight",)}
    assert {tuple(sorted(u)) for u in full.task_graph(moved).units} == \
        {("fc3.weight",), ("fc1.weight", "fc2.weight")}
    delta = DeltaSimulator(graph, two, cost)
    delta.reset(dp)
    for accept in (False, True):
        assert delta.propose(fc3, alone) == pytest.approx(full.simulate(moved).cost, rel=1e-12)
        assert tasks(delta.timeline()) == tasks(full.simulate(moved))
        delta.accept() if accept else delta.reject()
    assert tasks(delta.timeline()) == tasks(full.simulate(moved))
    delta.propose(fc3, dp["fc3"])
    assert tasks(delta.timeline()) == tasks(full.simulate(dp))
    delta.reject()
    assert tasks(delta.timeline()) == tasks(full.simulate(moved))
    # fc3 on the other device: its unit keeps its parameters, not its tasks
    other = ParallelConfig(alone.degrees, (0,))
    delta.propose(fc3, other)
    assert tasks(delta.timeline()) == tasks(full.simulate(moved.replace_all({"fc3": other})))


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_runtime_issues_the_simulated_buckets(ranks):
    """Every small model under every test strategy: the all-reduces the runtime's plan
    issues (rank set, parameters, bytes) are the simulated task graph's buckets."""
    cluster = cpu_ranks(ranks)
    merged = 0
    for model in SMALL_MODELS:
        graph = small(model)
        simulator = Simulator(graph, cluster, AnalyticCostModel())
        for name in STRATEGIES:
            s = strategy(name, graph, cluster)
            plan = compile_plan(graph, s, ranks)
            issued = sorted((b[0].ranks, tuple(dict.fromkeys(x.param for x in b)),
                             sum(x.nbytes for x in b)) for b in plan.buckets)
            simulated = sorted((b.devices, b.params, b.nbytes)
                               for b in simulator.task_graph(s).buckets())
            assert issued == simulated, (model, name)
            merged += sum(len(params) > 1 for _, params, _ in issued)
    assert merged   # some buckets sum several parameters
