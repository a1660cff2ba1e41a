"""The analytic (roofline) cost model and the CostModel protocol."""

import math

import pytest

from flextui.cost import AnalyticCostModel, CostModel, OpCost
from flextui.graph import GraphBuilder
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


def test_any_object_with_the_methods_is_a_cost_model():
    class Fixed:
        identity = "fixed"

        def op_cost(self, op, block_shape, device):
            return OpCost(1.0, 2.0)

        def transfer_s(self, nbytes, link):
            return 0.5

    assert isinstance(Fixed(), CostModel) and isinstance(AnalyticCostModel(), CostModel)
