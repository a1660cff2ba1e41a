"""The analytic (roofline) cost model and the CostModel protocol."""

import math

import pytest

from flextui.cost import AnalyticCostModel, CostModel, OpCost
from flextui.cost.model import analytic_update_s, checked_cost_model
from flextui.cost.ring import ring_allreduce_s
from flextui.graph import GraphBuilder
from flextui.search.exhaustive.tables import BoundTables
from flextui.sim import DeltaSimulator, Simulator, TaskKind
from flextui.sim.memory import MemoryPolicy
from flextui.strategy import builtin_strategy
from helpers import cluster


@pytest.fixture
def h100():
    return cluster("dgx-h100").device(0)


def build():
    g = GraphBuilder("c")
    x = g.input((64, 8192), name="x")
    y = g.linear(x, 8192, name="fc")
    g.relu(y, name="relu")
    return g.build()


def test_large_matmul_is_compute_bound(h100):
    graph, model = build(), AnalyticCostModel()
    cost = model.op_cost(graph.op("fc"), (64, 8192), h100)
    flops = 2 * 64 * 8192 * 8192
    peak = h100.spec.flops_for("float32") * model.compute_efficiency
    weights = 8192 * 8192 * 4
    assert weights / (h100.spec.mem_bandwidth * model.memory_efficiency) < flops / peak
    assert math.isclose(cost.forward_s, flops / peak + model.launch_overhead_s)
    assert math.isclose(cost.backward_s, 2 * flops / peak + model.launch_overhead_s)


def test_elementwise_is_memory_bound_and_halving_the_block_halves_the_work(h100):
    graph, model = build(), AnalyticCostModel(launch_overhead_s=0.0)
    whole = model.op_cost(graph.op("relu"), (64, 8192), h100)
    nbytes = 2 * 64 * 8192 * 4  # read the input block, write the output block
    assert math.isclose(whole.forward_s, nbytes / (h100.spec.mem_bandwidth * model.memory_efficiency))
    half = model.op_cost(graph.op("relu"), (32, 8192), h100)
    assert math.isclose(half.forward_s * 2, whole.forward_s)


def test_inputs_are_free_and_transfers_follow_latency_plus_size_over_bandwidth(h100):
    graph, model = build(), AnalyticCostModel()
    assert model.op_cost(graph.op("x"), (64, 8192), h100) == OpCost(0.0, 0.0)
    link = cluster("p100-4x4").route(0, 4)[0]
    assert math.isclose(model.transfer_s(10**6, link), link.latency + 10**6 / link.bandwidth)


class Fixed:
    """Task and transfer times only: not a cost model by itself."""

    identity = "fixed"

    def op_cost(self, op, block_shape, device):
        return OpCost(0.0, 0.0) if op.type == "input" else OpCost(1.0, 2.0)

    def transfer_s(self, nbytes, link):
        return 0.5


class Derived(Fixed, CostModel):
    """The same, derived from CostModel: the documented update and all-reduce."""


class Whole(Fixed):
    """The same with every member, not derived from CostModel."""

    def update_s(self, nbytes, device, optimizer=None):
        return 0.25

    def allreduce_s(self, nbytes, devices, cluster):
        return 0.125


def test_any_object_with_every_member_is_a_cost_model():
    for cost_model in (Whole(), Derived(), AnalyticCostModel()):
        assert isinstance(cost_model, CostModel)
        assert checked_cost_model(cost_model) is cost_model


def test_a_cost_model_derived_from_the_protocol_gets_the_documented_update_and_allreduce():
    p100 = cluster("p100-4x4")
    derived = Derived()
    assert derived.update_s(2**20, p100.device(0)) == analytic_update_s(2**20, p100.device(0))
    assert derived.allreduce_s(2**20, (0, 1, 4), p100) == ring_allreduce_s(2**20, (0, 1, 4), p100)
    graph = build()
    timeline = Simulator(graph, p100, derived).simulate(builtin_strategy("data-parallel", graph,
                                                                         p100))
    updates = [t for t in timeline.tasks if t.kind == TaskKind.UPDATE]
    syncs = [t for t in timeline.tasks if t.kind == TaskKind.SYNC]
    assert updates and all(t.end - t.start == pytest.approx(analytic_update_s(t.nbytes, p100.device(0)))
                           for t in updates)       # the cluster's GPUs are all alike
    assert syncs and all(t.end - t.start > 0.0 for t in syncs)
    whole = Simulator(graph, p100, Whole()).simulate(builtin_strategy("data-parallel", graph,
                                                                      p100))
    assert {round(t.end - t.start, 9) for t in whole.tasks if t.kind == TaskKind.UPDATE} == {0.25}
    assert {round(t.end - t.start, 9) for t in whole.tasks if t.kind == TaskKind.SYNC} == {0.125}


def test_a_cost_model_without_every_member_is_refused_naming_what_it_lacks():
    graph, p100 = build(), cluster("p100-4x4")
    assert not isinstance(Fixed(), CostModel)
    for refuse in (lambda: Simulator(graph, p100, Fixed()),
                   lambda: DeltaSimulator(graph, p100, Fixed()),
                   lambda: BoundTables(graph, p100, Fixed(), True, MemoryPolicy.PENALIZE)):
        with pytest.raises(TypeError, match="Fixed is not a cost model: it lacks update_s, "
                           "allreduce_s; define them, or derive it from flextui.cost.CostModel"):
            refuse()
