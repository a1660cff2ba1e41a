"""Pipelines in the simulator: micro-batches and their schedules, hand-computed on a
uniform chain of stages (the textbook bubble (p-1)/(m+p-1) of the step, exactly, for
GPipe and 1F1B; each stage's order of passes; the activations each schedule holds),
gradients summed over every micro-batch before the sync, and delta simulation equal
to a full one with pipeline moves."""

import json
import random

import pytest

from flextui.cost import AnalyticCostModel
from flextui.errors import FlextuiError, StrategyError
from flextui.graph import GraphBuilder
from flextui.runtime.spec import LaunchSpec, Training
from flextui.runtime.summary import device_labels
from flextui.runtime.walk import walk
from flextui.sim import DeltaSimulator, Simulator
from flextui.sim.taskgraph import TaskKind
from flextui.strategy import builtin_strategy, load_strategy, random_config, save_strategy
from flextui.strategy.pipeline import (
    Pipeline,
    Schedule,
    microbatch_choices,
    stages,
    windows,
)
from helpers import cluster as load_cluster, line_cluster, model as load_model
from test_sim_delta import random_stages, signature
from test_sim_full import FixedCost, place


class NoComm(FixedCost):
    """FixedCost (1 s forward, 2 s backward a task, whatever its block) with free
    transfers and updates: the textbook pipeline."""

    def transfer_s(self, nbytes, link):
        return 0.0

    def update_s(self, nbytes, device, optimizer=None):
        return 0.0


def four_stages():
    """x -> fc0 -> fc1 -> fc2 -> fc3, fc_i alone on device i (x with fc0): a batch of 8
    samples of 8 float32 features, each layer's output 8 x 8."""
    g = GraphBuilder("four")
    x = g.input((8, 8), name="x")
    for i in range(4):
        x = g.linear(x, 8, name=f"fc{i}")
    graph = g.build()
    return graph, place(graph, {"x": 0, **{f"fc{i}": i for i in range(4)}})


def passes(timeline, device):
    """The device's compute tasks in start order, as "F<micro-batch>"/"B<micro-batch>"."""
    return [("F" if t.kind == TaskKind.FORWARD else "B") + str(t.micro)
            for t in timeline.tasks if t.resources == (device,) and t.op != "x"
            and t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD)]


@pytest.mark.parametrize("schedule", list(Schedule))
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_the_bubble_of_a_uniform_four_stage_pipeline_is_the_textbooks(schedule, m):
    graph, strategy = four_stages()
    timeline = Simulator(graph, line_cluster(4), NoComm()).simulate(
        strategy.with_pipeline(Pipeline(m, schedule)))
    p, f, b = 4, 1.0, 2.0
    # every stage computes m forward and m backward passes; the step takes m + p - 1
    # of them end to end, so each stage idles (p - 1) / (m + p - 1) of it
    assert timeline.makespan == (m + p - 1) * (f + b)
    for device in timeline.devices:
        assert device.busy_s == m * (f + b)
        assert device.idle_s / timeline.makespan == pytest.approx((p - 1) / (m + p - 1),
                                                                  abs=1e-15)


def two_stages_of_two_ops():
    """x -> a0 -> b0 on device 0, a1 -> b1 on device 1: each stage's passes take two
    tasks (2 s forward, 4 s backward a stage)."""
    g = GraphBuilder("two")
    x = g.input((8, 8), name="x")
    for i in range(2):
        x = g.linear(g.linear(x, 8, name=f"a{i}"), 8, name=f"b{i}")
    graph = g.build()
    return graph, place(graph, {"x": 0, "a0": 0, "b0": 0, "a1": 1, "b1": 1})


@pytest.mark.parametrize("schedule", list(Schedule))
@pytest.mark.parametrize("m", [1, 2, 4])
def test_micro_batches_go_through_a_stage_of_several_ops_one_after_another(schedule, m):
    """Each op alone would take every micro-batch before the next op took the first (the
    scheduler runs tasks as they come ready); a stage takes them through in turn, so the
    bubble is still the textbook's: (m + p - 1) stage passes of 2 + 4 s."""
    graph, strategy = two_stages_of_two_ops()
    timeline = Simulator(graph, line_cluster(2), NoComm()).simulate(
        strategy.with_pipeline(Pipeline(m, schedule)))
    assert timeline.makespan == (m + 1) * 6.0
    if m == 2:
        order = [(t.op, t.kind.name[0], t.micro) for t in timeline.tasks
                 if t.resources == ("d0",) and t.op not in ("x", "")]
        assert order == [("a0", "F", 0), ("b0", "F", 0), ("a0", "F", 1), ("b0", "F", 1),
                         ("b0", "B", 0), ("a0", "B", 0), ("b0", "B", 1), ("a0", "B", 1)]


def test_gpipe_runs_every_forward_pass_before_any_backward_pass():
    graph, strategy = four_stages()
    timeline = Simulator(graph, line_cluster(4), NoComm()).simulate(
        strategy.with_pipeline(Pipeline(4, Schedule.GPIPE)))
    for d in range(4):
        assert passes(timeline, f"d{d}") == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]


def test_1f1b_stage_s_warms_up_with_p_minus_s_forward_passes_then_alternates():
    graph, strategy = four_stages()
    timeline = Simulator(graph, line_cluster(4), NoComm()).simulate(
        strategy.with_pipeline(Pipeline(4, Schedule.ONE_F_ONE_B)))
    assert passes(timeline, "d0") == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
    assert passes(timeline, "d1") == ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]
    assert passes(timeline, "d2") == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert passes(timeline, "d3") == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
    # and stage 3 starts each forward pass only once the one before it is through
    fc3 = sorted((t.micro, t.kind.name, t.start, t.end) for t in timeline.tasks
                 if t.op == "fc3" and t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD))
    assert fc3 == [(0, "BACKWARD", 4.0, 6.0), (0, "FORWARD", 3.0, 4.0),
                   (1, "BACKWARD", 7.0, 9.0), (1, "FORWARD", 6.0, 7.0),
                   (2, "BACKWARD", 10.0, 12.0), (2, "FORWARD", 9.0, 10.0),
                   (3, "BACKWARD", 13.0, 15.0), (3, "FORWARD", 12.0, 13.0)]


def test_activations_held_follow_the_schedule():
    """A micro-batch of 8 / m samples: each layer's output block is 8 / m x 8 float32
    (256 / m bytes), kept by its forward task; a stage also keeps the input block it
    received (stage 0: the batch x it made). GPipe holds all m micro-batches, 1F1B at
    stage s at most min(m, 4 - s)."""
    graph, strategy = four_stages()
    sim = Simulator(graph, line_cluster(4), NoComm())
    for m in (1, 2, 4, 8):
        per_micro = 2 * 256 // m    # its output and its input, a micro-batch's
        gpipe = sim.simulate(strategy.with_pipeline(Pipeline(m, Schedule.GPIPE)))
        assert [d.memory.activations for d in gpipe.devices] == [m * per_micro] * 4
        one_f = sim.simulate(strategy.with_pipeline(Pipeline(m, Schedule.ONE_F_ONE_B)))
        assert [d.memory.activations for d in one_f.devices] == \
            [min(m, 4 - s) * per_micro for s in range(4)]


def test_stages_and_windows_come_from_the_operator_dim():
    graph, strategy = four_stages()
    configs = strategy.configs_of(graph)
    assert stages(graph, configs) == [0, 0, 1, 2, 3]
    assert windows(graph, configs, Pipeline(8, Schedule.ONE_F_ONE_B)) == [4, 4, 3, 2, 1]
    assert windows(graph, configs, Pipeline(2, Schedule.ONE_F_ONE_B)) == [2, 2, 2, 2, 1]
    assert windows(graph, configs, Pipeline(8, Schedule.GPIPE)) == [8] * 5
    dp = [c for c in builtin_strategy("data-parallel", graph, line_cluster(4))
          .configs_of(graph)]
    assert set(stages(graph, dp)) == {0}   # one stage: 1F1B is gradient accumulation


def test_the_gradients_of_every_micro_batch_are_summed_before_the_sync():
    """Data parallel on 2 devices, 2 micro-batches: each device runs fc's two blocks'
    backward passes (one per micro-batch) before the one all-reduce of the weights."""
    g = GraphBuilder("dp")
    g.linear(g.input((8, 8), name="x"), 8, name="fc")
    graph = g.build()
    cluster = line_cluster(2)
    dp = builtin_strategy("data-parallel", graph, cluster)
    timeline = Simulator(graph, cluster, FixedCost()).simulate(
        dp.with_pipeline(Pipeline(2, Schedule.ONE_F_ONE_B)))
    backward = [t for t in timeline.tasks if t.kind == TaskKind.BACKWARD]
    syncs = [t for t in timeline.tasks if t.kind == TaskKind.SYNC]
    assert sorted(t.micro for t in backward) == [0, 0, 1, 1]
    # 1F1B with one stage: F0 B0 F1 B1 on each device, 1 s and 2 s each
    assert sorted((t.micro, t.start, t.end) for t in backward) == [(0, 1.0, 3.0)] * 2 + \
        [(1, 4.0, 6.0)] * 2
    assert len(syncs) == 1 and syncs[0].start == 6.0


def test_microbatches_that_a_sample_split_does_not_allow_are_refused():
    graph, strategy = four_stages()
    cluster = line_cluster(4)
    dp = builtin_strategy("data-parallel", graph, cluster)   # 4 blocks of 2 samples
    assert microbatch_choices(graph, dp.configs_of(graph)) == [1, 2]
    assert microbatch_choices(graph, strategy.configs_of(graph)) == [1, 2, 4, 8]
    with pytest.raises(Exception, match="does not split into 4 micro-batches"):
        Simulator(graph, cluster, NoComm()).simulate(dp.with_pipeline(Pipeline(4)))


def test_proposals_under_micro_batches_keep_sample_splits_a_micro_batch_allows():
    graph, strategy = four_stages()
    delta = DeltaSimulator(graph, line_cluster(4), NoComm())
    delta.reset(strategy.with_pipeline(Pipeline(8)))
    dp = builtin_strategy("data-parallel", graph, line_cluster(4))
    with pytest.raises(ValueError, match="micro-batches"):
        delta.propose(graph.op("fc1"), dp["fc1"])


SMALL = {"transformer": {"layers": 2}, "rnnlm": {"steps": 3}}


@pytest.mark.parametrize("name,where", [("mlp", "p100-4x4"), ("lenet", "dgx-a100"),
                                        ("transformer", "p100-4x4"), ("rnnlm", "dgx-a100")])
def test_delta_equals_full_with_pipeline_moves(name, where):
    """Random op configs (sample splits a micro-batch allows), shard stages (up to 3:
    gathers per micro-batch, waiting as their ops' tasks do, stage links included) and
    pipelines (micro-batches and schedule), accepted or rejected at random: each
    proposal's timeline and memory equal a full simulation's."""
    graph = load_model(name, **SMALL.get(name, {}))
    cluster = load_cluster(where)
    cost = AnalyticCostModel()
    full, delta = Simulator(graph, cluster, cost), DeltaSimulator(graph, cluster, cost)
    rng = random.Random(sum(map(ord, name)))
    start = builtin_strategy(rng.choice(["model-parallel", "random"]), graph, cluster)
    choices = microbatch_choices(graph, start.configs_of(graph), 8)
    delta.reset(start.with_pipeline(Pipeline(max(choices[:3]), rng.choice(list(Schedule)))))
    for step in range(30):
        current = delta.strategy
        m = current.pipeline.microbatches
        if rng.random() < 0.25:
            choices = microbatch_choices(graph, current.configs_of(graph), 8)
            pipeline = Pipeline(rng.choice(choices), rng.choice(list(Schedule)))
            cost_of = delta.propose_pipeline(pipeline)
            proposed = current.with_pipeline(pipeline)
        else:
            op = rng.choice(graph.ops)
            config = random_config(op, cluster.num_devices, rng, m)
            stages = random_stages(graph, rng)   # stage 3 too: gathers per micro-batch
            cost_of = delta.propose_many([(op, config)], stages=stages)
            proposed = current.replace(op.name, config).with_shards(stages)
        expected = full.simulate(proposed)
        assert cost_of == expected.cost, f"step {step}"
        got = delta.timeline()
        assert signature(got) == signature(expected), f"step {step}"
        assert [d.memory for d in got.devices] == [d.memory for d in expected.devices]
        delta.accept() if rng.random() < 0.6 else delta.reject()
    assert signature(delta.timeline()) == signature(full.simulate(delta.strategy))


def test_a_strategy_file_keeps_its_micro_batches_and_refuses_bad_ones(tmp_path):
    graph, strategy = four_stages()
    cluster = line_cluster(4)
    piped = strategy.with_pipeline(Pipeline(4, Schedule.ONE_F_ONE_B))
    path = tmp_path / "s.json"
    save_strategy(path, piped, graph, cluster)
    data = json.loads(path.read_text())
    assert (data["microbatches"], data["schedule"]) == (4, "1f1b")
    assert load_strategy(path, graph, cluster) == piped != strategy
    save_strategy(path, strategy, graph, cluster)   # none: no keys, as before
    assert "microbatches" not in json.loads(path.read_text())
    for bad, says in [({"microbatches": 0}, "microbatches"),
                      ({"microbatches": 2, "schedule": "zigzag"}, "gpipe, 1f1b"),
                      ({"microbatches": 3}, "does not split into 3 micro-batches")]:
        path.write_text(json.dumps({**data, **bad}))
        with pytest.raises(StrategyError, match=says):
            load_strategy(path, graph, cluster)


def test_a_launch_plan_carries_the_micro_batches():
    graph, strategy = four_stages()
    piped = strategy.with_pipeline(Pipeline(2, Schedule.GPIPE))
    spec = LaunchSpec(graph, piped, 4, Training(steps=1))
    assert LaunchSpec.decode(spec.encode(), "plan").strategy == piped
    body = spec.to_dict()
    body["strategy"][4]["chunks"] = 2
    with pytest.raises(FlextuiError, match="strategy pipeline.*chunks"):
        LaunchSpec.from_dict(body, "plan")


@pytest.mark.parametrize("schedule", list(Schedule))
@pytest.mark.parametrize("stages_of", [four_stages, two_stages_of_two_ops])
def test_each_rank_runs_its_passes_in_the_simulated_order(schedule, stages_of):
    """The runtime's walk, restricted to a rank, is the order the simulator runs that
    device's compute tasks in (a uniform pipeline: the walk's unit times are its)."""
    graph, strategy = stages_of()
    piped = strategy.with_pipeline(Pipeline(4, schedule))
    cluster = line_cluster(max(c.devices[0] for c in piped.values()) + 1)
    timeline = Simulator(graph, cluster, NoComm()).simulate(piped)
    passes = walk(graph, piped.configs_of(graph), piped.pipeline)
    for d, device in enumerate(cluster.devices):
        simulated = [(t.kind.name[0].lower(), t.op, t.micro) for t in timeline.tasks
                     if t.resources == (device.name,) and t.op not in ("x", "")
                     and t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD)]
        walked = [(phase, graph.ops[i].name, j) for phase, i, j in passes
                  if piped[graph.ops[i].name].devices == (d,) and graph.ops[i].name != "x"]
        assert walked == simulated


def test_a_runs_table_names_the_stage_each_device_runs():
    graph, strategy = four_stages()
    cluster = line_cluster(4)
    assert device_labels(cluster, graph, strategy) == ["d0", "d1", "d2", "d3"]
    assert device_labels(cluster, graph, strategy.with_pipeline(Pipeline(2))) == \
        ["d0 · stage 0", "d1 · stage 1", "d2 · stage 2", "d3 · stage 3"]
