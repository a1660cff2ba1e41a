"""Delta simulation gives exactly the full simulation's timeline, task by task, with
proposals that split ops, switch their recomputation and set parameters' shard
stages."""

import random
import tomllib
from importlib.resources import files

import pytest

from flextui.cost import AnalyticCostModel
from flextui.graph.library import model_names
from flextui.machine import parse_cluster
from flextui.sim import DeltaSimulator, Simulator
from flextui.strategy import ShardStage, builtin_strategy, random_config
from flextui.strategy.precision import Precision
from flextui.strategy.shards import stages_for
from helpers import cluster, model

# smaller unrollings keep the full simulations this test compares against quick
SMALL = {"rnntc": {"steps": 3}, "rnnlm": {"steps": 3}, "nmt": {"steps": 3},
         "transformer": {"layers": 2}, "resnet101": {"depth": 50}}


def signature(timeline):
    return {t.key: (t.resources, t.ready, t.start, t.end, t.nbytes) for t in timeline.tasks}


def proposed_config(op, where, rng, strategy):
    """A random config, or (a quarter of the time) the op's own with recomputation
    switched; a quarter of random configs are recomputed (never a graph input's)."""
    if op.type != "input" and rng.random() < 0.25:
        return strategy[op.name].with_recompute(not strategy[op.name].recompute)
    return random_config(op, where.num_devices, rng).with_recompute(
        op.type != "input" and rng.random() < 0.25)


def random_stages(graph, rng):
    """A quarter of the time, 1..3 random parameters' shard stages (any the parameter
    may use: up to 3, or 2 for a shared one)."""
    if not graph.parameters or rng.random() >= 0.25:
        return {}
    return {name: rng.choice(stages_for(name in graph.shared_parameters))
            for name in rng.sample(sorted(graph.parameters), min(3, len(graph.parameters)))[
                :rng.randint(1, 3)]}


def random_changes(graph, where, rng, max_ops, strategy):
    """1..max_ops (op, config) pairs: a random op and some of its graph neighbours (so
    changes share edges), sometimes the same op twice."""
    op = rng.choice(graph.ops)
    ops = [op]
    for _ in range(rng.randrange(max_ops)):
        near = graph.predecessors(ops[-1]) + graph.successors(ops[-1]) + [ops[-1]]
        ops.append(rng.choice(near))
    return [(o, proposed_config(o, where, rng, strategy)) for o in ops]


def run_proposals(graph, where, proposals, seed, check_every=1, max_ops=1):
    cost_model = AnalyticCostModel()
    full = Simulator(graph, where, cost_model)
    delta = DeltaSimulator(graph, where, cost_model)
    rng = random.Random(seed)
    start = builtin_strategy(rng.choice(["data-parallel", "expert", "random"]), graph, where)
    delta.reset(start.with_shards(dict.fromkeys(list(graph.parameters)[::3],
                                                ShardStage.GRADIENTS)).with_precision(
        rng.choice(list(Precision))))
    for step in range(proposals):
        stages = random_stages(graph, rng)
        if max_ops == 1:
            op = rng.choice(graph.ops)
            changes = [(op, proposed_config(op, where, rng, delta.strategy))]
            cost = delta.propose_many(changes, stages=stages) if stages else \
                delta.propose(*changes[0])
        else:
            changes = random_changes(graph, where, rng, max_ops, delta.strategy)
            cost = delta.propose_many(changes, stages=stages)
        proposed = delta.strategy.replace_all(
            {op.name: config for op, config in changes}).with_shards(stages)
        if step % check_every == 0:
            expected = full.simulate(proposed)
            assert cost == expected.cost, f"step {step}: {changes}"
            got = delta.timeline()
            assert signature(got) == signature(expected), f"step {step}: {changes}"
            assert [d.memory for d in got.devices] == [d.memory for d in expected.devices]
        if rng.random() < 0.5:
            delta.accept()
        else:
            delta.reject()
    assert signature(delta.timeline()) == signature(full.simulate(delta.strategy))


@pytest.mark.parametrize("name", model_names())
def test_delta_equals_full_on_every_model(name):
    graph = model(name, **SMALL.get(name, {}))
    run_proposals(graph, cluster("dgx-a100"), proposals=12, seed=1)


@pytest.mark.parametrize("name", ["lenet", "inception_v3", "rnnlm", "transformer"])
def test_delta_of_several_ops_at_once_equals_full(name):
    """Propagation moves change a few neighbouring ops (sharing edges and, in RNNs,
    parameters) in one proposal; accept and reject stay exact."""
    graph = model(name, **SMALL.get(name, {}))
    run_proposals(graph, cluster("p100-4x4"), proposals=25, seed=7, max_ops=4)


def test_reject_restores_the_previous_timeline_exactly():
    graph, where = model("lenet"), cluster("p100-4x4")
    delta = DeltaSimulator(graph, where, AnalyticCostModel())
    before_cost = delta.reset(builtin_strategy("data-parallel", graph, where))
    before = signature(delta.timeline())
    rng = random.Random(3)
    for op in graph.ops:
        delta.propose(op, random_config(op, where.num_devices, rng))
        delta.reject()
    assert signature(delta.timeline()) == before and delta.cost == before_cost


LATE_STAGE_SAYS = {"graph edit": "task graph's edit", "event loop": "simulation"}


@pytest.mark.parametrize("where_late", list(LATE_STAGE_SAYS))
def test_a_proposal_past_its_deadline_is_abandoned_leaving_the_simulator_as_it_was(
        where_late, monkeypatch):
    graph, where = model("lenet"), cluster("p100-4x4")
    delta = DeltaSimulator(graph, where, AnalyticCostModel())
    before_cost = delta.reset(builtin_strategy("data-parallel", graph, where))
    before, strategy = signature(delta.timeline()), delta.strategy
    # each stage before the late one keeps no clock, so the late one must notice
    if where_late == "event loop":
        monkeypatch.setattr("flextui.sim.taskgraph.check_deadline", lambda deadline, what: None)
    rng = random.Random(4)
    for op in graph.ops[1:]:
        with pytest.raises(TimeoutError, match=LATE_STAGE_SAYS[where_late]):
            delta.propose(op, random_config(op, where.num_devices, rng), deadline=0.0)
        assert signature(delta.timeline()) == before and delta.cost == before_cost
        assert delta.strategy == strategy
    op = graph.ops[2]   # and it goes on as if nothing happened
    delta.propose(op, random_config(op, where.num_devices, rng))
    delta.accept()
    full = Simulator(graph, where, AnalyticCostModel()).simulate(delta.strategy)
    assert signature(delta.timeline()) == signature(full)


def test_propose_needs_accept_or_reject():
    graph, where = model("lenet"), cluster("dgx-a100")
    delta = DeltaSimulator(graph, where, AnalyticCostModel())
    delta.reset(builtin_strategy("data-parallel", graph, where))
    op = graph.ops[1]
    delta.propose(op, random_config(op, 8, random.Random(0)))
    with pytest.raises(RuntimeError, match="accept"):
        delta.propose(op, random_config(op, 8, random.Random(1)))


def k80_nodes(count: int):
    """The paper's K80 cluster cut down to ``count`` nodes (its asymmetric PCIe tree)."""
    data = tomllib.loads((files("flextui.library.clusters") / "k80-16x4.toml").read_text())
    data["nodes"]["count"] = count
    return parse_cluster(data, "k80 cut down")


#: the largest graphs are compared with a full simulation every other proposal
CHECK_EVERY = {"inception_v3": 2, "resnet101": 2}
CLUSTERS = {"p100-4x4": lambda: cluster("p100-4x4"), "k80-2x4": lambda: k80_nodes(2),
            "dgx-h100": lambda: cluster("dgx-h100")}


@pytest.mark.slow
@pytest.mark.parametrize("cluster_name", CLUSTERS)
@pytest.mark.parametrize("name", model_names())
def test_delta_equals_full_over_many_proposals(name, cluster_name):
    """Thousands of proposals in all: 100 per model and cluster, every one compared with
    a full simulation (every other one for the two largest graphs, whose full
    simulations took a fifth of CI; a wrong accepted state still shows at the next
    comparison, and the last state is always compared)."""
    graph = model(name, **SMALL.get(name, {}))
    run_proposals(graph, CLUSTERS[cluster_name](), proposals=100,
                  seed=sum(map(ord, cluster_name)), check_every=CHECK_EVERY.get(name, 1))
