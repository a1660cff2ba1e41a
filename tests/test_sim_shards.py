"""Sharded training state (ZeRO stages 1 to 3) in the simulator and the strategy file:
each device of a replica group keeps and updates the optimizer's state of its part of
the group (stage 2: and keeps that part's gradient; stage 3: and of the parameter,
gathered before each pass of its op), hand-computed; a group on one device is not
sharded; the sync costs the all-reduce's time (stage 3: the reduce-scatter's); a
stage-only proposal under delta simulation equals a full simulation; a shared parameter
may not use stage 3; the file's ``params`` section."""

import json
import random

import pytest

from flextui.cost.optimizers import OptimizerKind
from flextui.errors import StrategyError
from flextui.graph import GraphBuilder
from flextui.graph.library import load_model
from flextui.search.shard import shard_run
from flextui.sim import DeltaSimulator, Simulator
from flextui.strategy import ShardStage, builtin_strategy, load_strategy, save_strategy
from helpers import line_cluster
from test_sim_delta import signature
from test_sim_full import FixedCost, place


class ByteUpdate(FixedCost):
    """FixedCost, but an update takes 1 ms per byte it updates."""

    def update_s(self, nbytes, device, optimizer=None):
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


def test_stage_3_gathers_the_parameter_before_each_pass_and_keeps_a_part():
    graph, cluster = chain(), line_cluster(2)
    sim = Simulator(graph, cluster, ByteUpdate())
    three = sim.simulate(sharded(builtin_strategy("data-parallel", graph, cluster), 3))
    # an all-gather or a reduce-scatter of N bytes: half the ring all-reduce's
    # 2 * (1/2) * N / 1e6 + 2 * 0.1 s, so the weight's (288 bytes) 0.100144 s, the
    # bias's (36) 0.100018 s; the two share the ring's links, so run one after the other
    assert [(t.kind.name, t.op, t.key, round(t.start, 9), round(t.end, 9), t.nbytes)
            for t in three.tasks if t.op != "x"] == [
        ("GATHER", "fc", (0, 1, 0, -1, 0, 0), 0.0, 0.100144, 288),
        ("GATHER", "fc", (0, 1, 0, -1, 1, 0), 0.100144, 0.200162, 36),
        ("FORWARD", "fc", (0, 1, 1, 0), 0.200162, 1.200162, 72),
        ("FORWARD", "fc", (0, 1, 1, 1), 0.200162, 1.200162, 72),
        ("FORWARD", "act", (0, 2, 1, 0), 1.200162, 2.200162, 72),
        ("FORWARD", "act", (0, 2, 1, 1), 1.200162, 2.200162, 72),
        ("BACKWARD", "act", (1, -2, 1, 0), 2.200162, 4.200162, 0),
        ("BACKWARD", "act", (1, -2, 1, 1), 2.200162, 4.200162, 0),
        # gathered again once fc's outputs' gradients are there
        ("GATHER", "fc", (1, -1, 0, -1, 0, 0), 4.200162, 4.300306, 288),
        ("GATHER", "fc", (1, -1, 0, -1, 1, 0), 4.300306, 4.400324, 36),
        ("BACKWARD", "fc", (1, -1, 1, 0), 4.400324, 6.400324, 0),
        ("BACKWARD", "fc", (1, -1, 1, 1), 4.400324, 6.400324, 0),
        # each group reduce-scattered alone (not bucketed), then each device updates
        # its part: 36 + ... 144 bytes of the weight, 20 of the bias (ceil(9 / 2) = 5)
        ("SYNC", "", (2, 0, 0), 6.400324, 6.500468, 288),
        ("SYNC", "", (2, 1, 0), 6.500468, 6.600486, 36),
        ("UPDATE", "", (3, 0, 0), 6.500468, 6.644468, 144),
        ("UPDATE", "", (3, 0, 1), 6.500468, 6.644468, 144),
        ("UPDATE", "", (3, 1, 0), 6.644468, 6.664468, 20),
        ("UPDATE", "", (3, 1, 1), 6.644468, 6.664468, 20)]
    assert three.makespan == pytest.approx(6.664468)
    # the part of the parameter, its gradient and state; the gathered 324 bytes held
    # while fc runs (its workspace)
    assert kept(three) == [(164, 164, 164)] * 2
    assert [d.memory.workspace for d in three.devices] == [324, 324]
    # bytes a device puts on its links: the reduce-scatters and the four all-gathers
    assert [d.bytes_sent for d in three.devices] == [3 * 324] * 2


def test_a_shared_parameter_may_not_use_stage_3():
    graph = load_model("rnnlm", batch_size=8, steps=3, layers=1, hidden=16, vocab=20)
    cluster = line_cluster(2)
    name = sorted(graph.shared_parameters)[0]
    dp = builtin_strategy("data-parallel", graph, cluster)
    with pytest.raises(StrategyError, match=rf"parameter '{name}' is used by several ops, so "
                                            r"its shard stage may be at most 2"):
        dp.with_shards({name: ShardStage.PARAMETERS}).check(graph, 2)
    delta = DeltaSimulator(graph, cluster, FixedCost())
    delta.reset(dp)
    with pytest.raises(ValueError, match="at most 2"):
        delta.propose_many([], stages={name: ShardStage.PARAMETERS})
    assert graph.shared_parameters == set(graph.parameters)   # an unrolled LSTM's
    drawn = [shard_run(graph, dp, random.Random(seed), 0.9) for seed in range(100)]
    assert {stage for stages in drawn for stage in stages.values()} == {1, 2}


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
    # into stage 3 and out: the op's tasks and gathers are rebuilt
    three = dp.with_shards({"fc.weight": ShardStage.PARAMETERS})
    cost = delta.propose_many([], stages={"fc.weight": ShardStage.PARAMETERS})
    assert cost == full.simulate(three).cost
    assert signature(delta.timeline()) == signature(full.simulate(three))
    delta.accept()
    delta.propose_many([], stages={"fc.weight": ShardStage.NONE})
    assert signature(delta.timeline()) == before
    delta.reject()
    assert signature(delta.timeline()) == signature(full.simulate(three))


def test_delta_refuses_a_parameter_not_in_the_graph():
    graph, cluster = chain(), line_cluster(2)
    delta = DeltaSimulator(graph, cluster, ByteUpdate())
    delta.reset(builtin_strategy("data-parallel", graph, cluster))
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
