"""Full simulation: hand-computed timelines, invariants on every model, and sanity laws."""

import math

import pytest

from flextui.cost import AnalyticCostModel, CostModel, OpCost
from flextui.cost.optimizers import OptimizerKind
from flextui.graph import GraphBuilder
from flextui.machine import Cluster
from flextui.sim import Simulator, TaskKind
from flextui.sim.schedule import schedule
from flextui.strategy import ParallelConfig, Strategy, builtin_strategy
from helpers import cluster, line_cluster, model


class FixedCost(CostModel):
    """1 s forward, 2 s backward per compute task, 0.5 s per update; inputs free;
    transfers latency + bytes / bandwidth."""

    identity = "fixed"

    def op_cost(self, op, block_shape, device):
        return OpCost(0.0, 0.0) if op.type == "input" else OpCost(1.0, 2.0)

    def transfer_s(self, nbytes, link):
        return link.latency + nbytes / link.bandwidth

    def update_s(self, nbytes, device, optimizer=None):
        return 0.5


def place(graph, devices: dict[str, int]) -> Strategy:
    return Strategy({op.name: ParallelConfig((1,) * len(op.space), (devices[op.name],))
                     for op in graph.ops})


def times(timeline):
    """(op, kind) -> (start, end) for compute tasks; transfers listed in start order
    (rounded to 1 ns)."""
    compute = {(t.op, t.kind.name): (round(t.start, 9), round(t.end, 9)) for t in timeline.tasks
               if t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD) and t.op not in ("x",)}
    transfers = [(t.resources, round(t.start, 9), round(t.end, 9)) for t in timeline.tasks
                 if t.kind == TaskKind.TRANSFER]
    return compute, transfers


def same(a, b) -> bool:
    """Equal structures whose numbers agree to 1 ns."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, abs_tol=1e-9)
    return a == b


def test_chain_on_one_device():
    g = GraphBuilder("chain")
    g.relu(g.linear(g.input((4, 8), name="x"), 8, name="fc"), name="act")
    graph = g.build()
    timeline = Simulator(graph, line_cluster(1), FixedCost()).simulate(place(graph, dict(x=0, fc=0, act=0)))
    compute, transfers = times(timeline)
    assert same(compute, {("fc", "FORWARD"): (0, 1), ("act", "FORWARD"): (1, 2),
                       ("act", "BACKWARD"): (2, 4), ("fc", "BACKWARD"): (4, 6)})
    assert same(transfers, [])
    assert timeline.makespan == 7.0  # + the weight and bias updates, 0.5 s each


def test_chain_over_two_devices_with_one_link():
    g = GraphBuilder("two")
    g.linear(g.linear(g.input((4, 8), name="x"), 8, name="a"), 8, name="b")
    graph = g.build()
    sim = Simulator(graph, line_cluster(2), FixedCost(), training=False)
    compute, transfers = times(sim.simulate(place(graph, dict(x=0, a=0, b=1))))
    hop = round(0.1 + 4 * 8 * 4 / 1e6, 9)  # a's output, 128 bytes
    assert same(transfers, [(("d0->d1",), 1.0, 1.0 + hop)])
    assert same(compute, {("a", "FORWARD"): (0, 1), ("b", "FORWARD"): (1 + hop, 2 + hop)})


def test_training_sends_the_gradient_back():
    g = GraphBuilder("two")
    g.linear(g.linear(g.input((4, 8), name="x"), 8, name="a"), 8, name="b")
    graph = g.build()
    timeline = Simulator(graph, line_cluster(2), FixedCost()).simulate(place(graph, dict(x=0, a=0, b=1)))
    compute, transfers = times(timeline)
    hop = round(0.1 + 128 / 1e6, 9)
    assert same(transfers, [(("d0->d1",), 1.0, 1 + hop), (("d1->d0",), 4 + hop, 4 + 2 * hop)])
    assert same(compute[("b", "BACKWARD")], (2 + hop, 4 + hop))
    assert same(compute[("a", "BACKWARD")], (4 + 2 * hop, 6 + 2 * hop))
    assert timeline.makespan == pytest.approx(7 + 2 * hop)  # a's two updates on d0 end last


def test_fork_join():
    g = GraphBuilder("fork")
    x = g.input((4, 8), name="x")
    g.add_(g.relu(x, name="left"), g.relu(x, name="right"), name="join")
    graph = g.build()
    sim = Simulator(graph, line_cluster(2), FixedCost(), training=False)
    compute, transfers = times(sim.simulate(place(graph, dict(x=0, left=0, right=1, join=0))))
    hop = round(0.1 + 128 / 1e6, 9)
    assert same(transfers, [(("d0->d1",), 0.0, hop), (("d1->d0",), 1 + hop, 1 + 2 * hop)])
    assert same(compute, {("left", "FORWARD"): (0, 1), ("right", "FORWARD"): (hop, 1 + hop),
                       ("join", "FORWARD"): (1 + 2 * hop, 2 + 2 * hop)})


def test_fifo_conflict_on_a_shared_link():
    g = GraphBuilder("fifo")
    x = g.input((4, 8), name="x")
    g.relu(x, name="first")
    g.relu(x, name="second")
    graph = g.build()
    sim = Simulator(graph, line_cluster(2), FixedCost(), training=False)
    compute, transfers = times(sim.simulate(place(graph, dict(x=0, first=1, second=1))))
    hop = round(0.1 + 128 / 1e6, 9)
    # both transfers are ready at 0; the first op's goes first (topological order), the
    # second waits for the link
    assert same(transfers, [(("d0->d1",), 0.0, hop), (("d0->d1",), hop, 2 * hop)])
    assert same(compute, {("first", "FORWARD"): (hop, 1 + hop), ("second", "FORWARD"): (1 + hop, 2 + hop)})


def test_data_parallel_all_reduce_by_hand():
    g = GraphBuilder("dp")
    g.linear(g.input((4, 8), name="x"), 16, bias=False, name="fc")
    graph = g.build()
    two = line_cluster(2, bandwidth=1e6, latency=0.1)
    strategy = builtin_strategy("data-parallel", graph, two)
    timeline = Simulator(graph, two, FixedCost()).simulate(strategy)
    sync, = [t for t in timeline.tasks if t.kind == TaskKind.SYNC]
    weight = 16 * 8 * 4
    # ring over 2 devices: 2(p-1)/p * bytes / bandwidth + 2(p-1) * latency
    assert sync.end - sync.start == pytest.approx(weight / 1e6 + 2 * 0.1)
    assert (sync.ready, sync.start) == (3.0, 3.0)  # when both replicas' backward is done
    assert set(sync.resources) == {"d0->d1", "d1->d0"}
    assert timeline.makespan == pytest.approx(3.0 + weight / 1e6 + 0.2 + 0.5)


def _check_invariants(sim, strategy):
    tg = sim.task_graph(strategy)
    t = schedule(tg)
    by_resource = {}
    for task in tg.live_ids():
        assert t.start[task] >= t.ready[task] - 1e-15
        assert t.end[task] == pytest.approx(t.start[task] + tg.store.duration_of(task))
        for p in tg.store.preds(task):
            assert t.ready[task] >= t.end[p]
        for r in tg.resources(task):
            by_resource.setdefault(r, []).append((t.start[task], t.end[task]))
    for spans in by_resource.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0 - 1e-12, "two tasks overlap on one device or link"
    timeline = sim.simulate(strategy)
    assert timeline.makespan == max(task.end for task in timeline.tasks)


@pytest.mark.parametrize("strategy", ["data-parallel", "expert", "model-parallel",
                                      pytest.param("random", marks=pytest.mark.slow)])
def test_invariants_on_every_model(any_model, strategy):
    p100 = cluster("p100-4x4")
    _check_invariants(Simulator(any_model, p100, AnalyticCostModel()),
                      builtin_strategy(strategy, any_model, p100))


@pytest.mark.parametrize("name", ["lenet", "alexnet", "rnnlm2", "transformer"])
def test_one_device_is_the_sum_of_its_tasks_and_never_transfers(name):
    graph, box = model(name), cluster("h100-single")
    sim = Simulator(graph, box, AnalyticCostModel())
    strategy = builtin_strategy("data-parallel", graph, box)
    timeline = sim.simulate(strategy)
    assert not [t for t in timeline.tasks if t.kind in (TaskKind.TRANSFER, TaskKind.SYNC)]
    tg = sim.task_graph(strategy)
    assert timeline.makespan == pytest.approx(sum(tg.store.duration_of(t) for t in tg.live_ids()))


def _scaled(c: Cluster, factor: float) -> Cluster:
    data = c.to_dict()
    for link in data["links"]:
        link["bandwidth"] *= factor
    return Cluster.from_dict(data)


@pytest.mark.parametrize("name", ["alexnet", "inception_v3", "rnnlm2", "nmt"])
def test_more_bandwidth_is_never_slower(name):
    graph, p100 = model(name), cluster("p100-4x4")
    fast = _scaled(p100, 4.0)
    for strategy in ("data-parallel", "expert"):
        slow_t = Simulator(graph, p100, AnalyticCostModel()).simulate(
            builtin_strategy(strategy, graph, p100)).makespan
        fast_t = Simulator(graph, fast, AnalyticCostModel()).simulate(
            builtin_strategy(strategy, graph, fast)).makespan
        assert fast_t <= slow_t


def test_memory_is_reported_and_overflow_is_penalised_or_rejected():
    graph, p100 = model("dlrm", rows_per_table=4_000_000), cluster("p100-4x4")  # 24 GiB with state
    strategy = builtin_strategy("data-parallel", graph, p100)  # every table on every GPU
    penalised = Simulator(graph, p100, AnalyticCostModel()).simulate(strategy)
    over = penalised.overflows
    assert set(over) == {d.name for d in p100.devices}
    assert penalised.memory_penalty_s == pytest.approx(sum(over.values()) / 1e6 * 1e-3)
    rejected = Simulator(graph, p100, AnalyticCostModel(), memory="reject").simulate(strategy)
    assert math.isinf(rejected.cost)
    mem = penalised.devices[0].memory
    assert mem.parameters == graph.param_count * 4 and mem.gradients == mem.parameters


def test_the_optimizers_state_is_counted_per_parameter():
    """fc's 8 x 8 weight and 8 biases (288 bytes): SGD keeps one momentum buffer of
    them, AdamW two moving averages; inference keeps neither, nor gradients."""
    g = GraphBuilder("chain")
    g.relu(g.linear(g.input((4, 8), name="x"), 8, name="fc"), name="act")
    graph = g.build()
    strategy = place(graph, dict(x=0, fc=0, act=0))
    memory = {kind: Simulator(graph, line_cluster(1), FixedCost(), optimizer=kind)
              .simulate(strategy).devices[0].memory for kind in OptimizerKind}
    sgd, adamw = memory[OptimizerKind.SGD], memory[OptimizerKind.ADAMW]
    assert (sgd.parameters, sgd.gradients, sgd.optimizer) == (288, 288, 288)
    assert (adamw.parameters, adamw.gradients, adamw.optimizer) == (288, 288, 576)
    assert adamw.total - sgd.total == 288
    inference = Simulator(graph, line_cluster(1), FixedCost(), training=False,
                          optimizer=OptimizerKind.ADAMW).simulate(strategy).devices[0].memory
    assert (inference.gradients, inference.optimizer) == (0, 0)
