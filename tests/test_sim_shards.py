"""Sharded training state (ZeRO stages 1 and 2) in the simulator and the strategy file:
each device of a replica group keeps and updates the optimizer's state of its part of
the group (stage 2: and keeps that part's gradient), hand-computed; a group on one
device is not sharded; the sync costs the all-reduce's time; a stage-only proposal
under delta simulation equals a full simulation; the file's ``params`` section."""

import json

import pytest

from flextui.cost.optimizers import OptimizerKind
from flextui.errors import StrategyError
from flextui.graph import GraphBuilder
from flextui.sim import DeltaSimulator, Simulator
from flextui.strategy import ShardStage, builtin_strategy, load_strategy, save_strategy
from helpers import line_cluster
from test_sim_delta import signature
from test_sim_full import FixedCost, place


class ByteUpdate(FixedCost):
    """FixedCost, but an update takes 1 ms per byte it updates."""

    def update_s(self, nbytes, device):
        return nbytes / 1000


def chain():
    """fc's weight is 9 x 8 (72 float32, 288 bytes), its bias 9 (36 bytes)."""
    g = GraphBuilder("chain")
    g.relu(g.linear(g.input((4, 8), name="x"), 9, name="fc"), name="act")
    return g.build()


def sharded(strategy, stage):
    return strategy.with_shards(dict.fromkeys(["fc.weight", "fc.bias"], ShardStage(stage)))


def kept(timeline):
    return [(d.memory.parameters, d.memory.gradients, d.memory.optimizer)
            for d in timeline.devices]


def sync_and_updates(timeline):
    return [(t.kind.name, round(t.start, 9), round(t.end, 9), t.nbytes)
            for t in timeline.tasks if t.kind.name in ("SYNC", "UPDATE")]


def test_each_device_updates_and_keeps_the_state_of_its_part_of_the_group():
    graph, cluster = chain(), line_cluster(2)
    sim = Simulator(graph, cluster, ByteUpdate())
    dp = builtin_strategy("data-parallel", graph, cluster)
    whole, one, two = (sim.simulate(sharded(dp, stage)) for stage in (0, 1, 2))
    # the gradients' one bucket (324 bytes) all-reduced from 6 s on the ring of the two
    # 1 MB/s links (0.1 s latency each way): 2 * (1/2) * 324 / 1e6 + 2 * 0.1 s
    sync = round(6 + 324e-6 + 0.2, 9)
    assert sync_and_updates(whole) == [("SYNC", 6.0, sync, 324), ("UPDATE", sync,
                                        round(sync + 0.324, 9), 324)] + \
        [("UPDATE", sync, round(sync + 0.324, 9), 324)]
    # sharded: a device's part of the weight is 72 / 2 = 36 elements, of the bias
    # ceil(9 / 2) = 5: 164 bytes to update, with the same sync (a reduce-scatter and an
    # all-gather move the all-reduce's bytes)
    assert sync_and_updates(one) == sync_and_updates(two) == \
        [("SYNC", 6.0, sync, 324)] + [("UPDATE", sync, round(sync + 0.164, 9), 164)] * 2
    assert kept(whole) == [(324, 324, 324)] * 2      # SGD's momentum: one of each
    assert kept(one) == [(324, 324, 164)] * 2
    assert kept(two) == [(324, 164, 164)] * 2
    adamw = Simulator(graph, cluster, ByteUpdate(), optimizer=OptimizerKind.ADAMW)
    assert kept(adamw.simulate(sharded(dp, 2))) == [(324, 164, 2 * 164)] * 2


def test_a_parameter_on_one_device_has_nothing_to_shard():
    graph, cluster = chain(), line_cluster(2)
    sim = Simulator(graph, cluster, ByteUpdate())
    alone = place(graph, dict(x=0, fc=1, act=1))
    assert sync_and_updates(sim.simulate(sharded(alone, 2))) == \
        sync_and_updates(sim.simulate(alone))
    assert kept(sim.simulate(sharded(alone, 2)))[1] == (324, 324, 324)


def test_buckets_hold_groups_of_one_stage():
    graph, cluster = chain(), line_cluster(2)
    sim = Simulator(graph, cluster, ByteUpdate())
    dp = builtin_strategy("data-parallel", graph, cluster)
    mixed = dp.with_shards({"fc.bias": ShardStage.OPTIMIZER})
    buckets = sim.task_graph(mixed).buckets()
    assert sorted(b.params for b in buckets) == [("fc.bias",), ("fc.weight",)]
    assert len(sim.task_graph(sharded(dp, 1)).buckets()) == 1


def test_a_proposal_of_stages_alone_equals_a_full_simulation_and_rejects_exactly():
    graph, cluster = chain(), line_cluster(2)
    dp = builtin_strategy("data-parallel", graph, cluster)
    full = Simulator(graph, cluster, ByteUpdate())
    delta = DeltaSimulator(graph, cluster, ByteUpdate())
    delta.reset(dp)
    before = signature(delta.timeline())
    cost = delta.propose_many([], stages={"fc.weight": ShardStage.GRADIENTS})
    expected = full.simulate(dp.with_shards({"fc.weight": ShardStage.GRADIENTS}))
    assert cost == expected.cost and signature(delta.timeline()) == signature(expected)
    assert [d.memory for d in delta.timeline().devices] == [d.memory for d in expected.devices]
    delta.reject()
    assert signature(delta.timeline()) == before and delta.strategy == dp
    delta.propose_many([], stages={"fc.weight": ShardStage.GRADIENTS})
    delta.accept()
    assert delta.strategy.shards == {"fc.weight": ShardStage.GRADIENTS}
    delta.propose_many([], stages={"fc.weight": ShardStage.NONE})
    delta.accept()
    assert delta.strategy == dp and signature(delta.timeline()) == before


def test_delta_refuses_a_stage_not_built_or_a_parameter_not_in_the_graph():
    graph, cluster = chain(), line_cluster(2)
    delta = DeltaSimulator(graph, cluster, ByteUpdate())
    delta.reset(builtin_strategy("data-parallel", graph, cluster))
    with pytest.raises(ValueError, match="not built"):
        delta.propose_many([], stages={"fc.weight": ShardStage.PARAMETERS})
    with pytest.raises(ValueError, match="no parameter 'fc.w'"):
        delta.propose_many([], stages={"fc.w": ShardStage.OPTIMIZER})


def test_the_strategy_file_lists_sharded_parameters(tmp_path):
    graph, cluster = chain(), line_cluster(2)
    chosen = builtin_strategy("data-parallel", graph, cluster).with_shards(
        {"fc.bias": ShardStage.GRADIENTS})
    path = tmp_path / "s.json"
    save_strategy(path, chosen, graph, cluster)
    assert json.loads(path.read_text())["params"] == {"fc.bias": {"shard": 2}}
    loaded = load_strategy(path, graph, cluster)
    assert loaded == chosen and loaded.shard("fc.weight") == ShardStage.NONE
    plain = tmp_path / "plain.json"
    save_strategy(plain, builtin_strategy("data-parallel", graph, cluster), graph, cluster)
    assert "params" not in json.loads(plain.read_text())


@pytest.mark.parametrize("params, says", [
    ({"fc.w": {"shard": 1}}, r"params\.fc\.w: graph 'chain' has no parameter 'fc\.w'"),
    ({"fc.bias": {"shard": 4}}, r"params\.fc\.bias\.shard: .*<= 3"),
    ({"fc.bias": {"shard": "2"}}, r"params\.fc\.bias\.shard: expected a whole number"),
    ({"fc.bias": {"stage": 2}}, r"params\.fc\.bias\.stage: unknown key 'stage'.* takes shard"),
    ({"fc.bias": {}}, r"params\.fc\.bias\.shard: missing required field"),
    ({"fc.bias": {"shard": 3}}, r"shard stage 3 .*not supported yet; use 1 or 2"),
    (["fc.bias"], r"params: expected a map, found \['fc\.bias'\]"),
])
def test_a_bad_params_section_is_refused_naming_the_field(tmp_path, params, says):
    graph, cluster = chain(), line_cluster(2)
    path = tmp_path / "s.json"
    save_strategy(path, builtin_strategy("data-parallel", graph, cluster), graph, cluster)
    data = json.loads(path.read_text())
    data["params"] = params
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyError, match=says):
        load_strategy(path, graph, cluster)
