"""The shard move: it sets a run of parameters (or all) to one new stage; a search under
a memory budget that no split or recomputation can meet (a weight no config divides,
whole with AdamW's state on every device that runs its op) meets it by sharding; with
memory to spare it makes no such move; its steps and strategies go through the search
log and replay to the chain's own strategy; logs from before make no such move."""

import random
import struct
from dataclasses import replace

import msgpack
import pytest

from flextui.cost import AnalyticCostModel
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import SearchLogError
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions, read_search_log, run_search
from flextui.search.logformat import MAGIC, frame
from flextui.search.mcmc import Chain
from flextui.search.shard import shard_run
from flextui.sim import Simulator
from flextui.strategy import ShardStage, builtin_strategy, valid_configs


def wide():
    """fc1's weight, 1023 x 2047 float32 (8.4 MB), has no dim 2 divides: every config
    of fc1 on 2 devices holds all of it wherever it runs."""
    return load_model("mlp", batch_size=8, in_features=2047, width=1023, layers=1,
                      num_classes=10)


def test_a_run_sets_one_new_stage_and_a_quarter_of_moves_set_every_parameter():
    graph, cluster = wide(), load_named_cluster("local-cpu-2")
    base = builtin_strategy("data-parallel", graph, cluster)
    names = list(graph.parameters)
    wholes = 0
    drawn = set()
    for seed in range(40):
        stages = shard_run(graph, base, random.Random(seed), 0.75)
        assert stages and len(set(stages.values())) == 1
        drawn |= set(stages.values())
        chosen = [n for n in names if n in stages]
        first = names.index(chosen[0])
        assert chosen == names[first:first + len(chosen)]   # consecutive
        wholes += len(chosen) == len(names)
    assert 0 < wholes < 40
    assert drawn == {ShardStage.OPTIMIZER, ShardStage.GRADIENTS, ShardStage.PARAMETERS}
    assert all(max(shard_run(graph, base, random.Random(seed), 0.75, top=2).values()) <= 2
               for seed in range(40))   # as a log from before stage 3 replays
    every = base.with_shards(dict.fromkeys(names, ShardStage.GRADIENTS))
    for seed in range(10):   # never the stage a run's first parameter has
        assert ShardStage.GRADIENTS not in shard_run(graph, every, random.Random(seed),
                                                     0.75).values()


def test_a_budget_no_split_or_recomputation_can_meet_is_met_by_sharding(tmp_path):
    graph, cluster = wide(), load_named_cluster("local-cpu-2")
    weight = graph.parameters["fc1.weight"].numel * 4
    assert all(c.degrees[1] == 1 for c in valid_configs(graph.op("fc1"), 2))
    # AdamW: the weight, its gradient and two moving averages wherever fc1 runs (4 x);
    # sharded at stage 2 over both devices: 1 + 1/2 + 2/2 (2.5 x)
    budget = int(3.5 * weight)
    options = SearchOptions(iterations=600, seed=0, memory_budget=budget,
                            optimizer=OptimizerKind.ADAMW)
    sim = Simulator(graph, cluster, AnalyticCostModel(), optimizer=OptimizerKind.ADAMW)
    unsharded = run_search(graph, cluster, AnalyticCostModel(), options.with_changes(shard=0.0))
    assert max(d.memory.total for d in sim.simulate(unsharded.best).devices) > budget
    result = run_search(graph, cluster, AnalyticCostModel(), options,
                        log_path=tmp_path / "run.ffsearch")
    found = sim.simulate(result.best)
    assert max(d.memory.total for d in found.devices) <= budget
    assert result.best.shard("fc1.weight") != ShardStage.NONE
    assert found.cost == result.best_cost
    # the log's steps replay to the strategies the chain held
    log = read_search_log(tmp_path / "run.ffsearch")
    assert any(e.stages for e in log.steps)
    assert log.best_strategy() == (result.best, result.best_cost)
    last = log.steps_of(0)[-1]
    assert sim.simulate(log.strategy_at(0, last.iteration)).cost == last.current


def test_with_memory_to_spare_the_search_never_shards():
    graph, cluster = wide(), load_named_cluster("local-cpu-2")
    start = builtin_strategy("data-parallel", graph, cluster)
    chain = Chain(0, graph, cluster, AnalyticCostModel(), SearchOptions(seed=0), start)
    plain = Chain(0, graph, cluster, AnalyticCostModel(), SearchOptions(seed=0, shard=0.0),
                  start)
    events = [replace(chain.step(), elapsed=0.0) for _ in range(200)]
    assert not any(e.stages for e in events)
    # the same chain, draw for draw
    assert events == [replace(plain.step(), elapsed=0.0) for _ in range(200)]


def test_options_from_a_log_from_before_make_no_shard_moves():
    old = SearchOptions().to_dict()
    del old["shard"]
    assert SearchOptions.from_dict(old, "log").shard == 0.0


def test_a_logged_stage_out_of_range_is_refused_naming_the_record(tmp_path):
    graph, cluster = wide(), load_named_cluster("local-cpu-2")
    path = tmp_path / "run.ffsearch"
    run_search(graph, cluster, AnalyticCostModel(), SearchOptions(iterations=5, seed=0),
               log_path=path)
    data = path.read_bytes()
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    header = data[:len(MAGIC) + 10 + length]   # the magic line and the header's frame
    step = [1, 0, 1, 0.1, 1, [[1, 1], 0], 1.0, None, None, True, 1, [], False, [[0, 4]]]
    path.write_bytes(header + frame(msgpack.packb(step)))
    with pytest.raises(SearchLogError, match=r"record 1 .*step stage 0: stage 4 is not one "
                                             r"of 0\.\.3"):
        read_search_log(path)
    step[-1] = [[len(graph.parameters), 1]]
    path.write_bytes(header + frame(msgpack.packb(step)))
    with pytest.raises(SearchLogError, match=r"parameter 4 out of range; the graph has 4"):
        read_search_log(path)
    step[12] = "no"
    path.write_bytes(header + frame(msgpack.packb(step)))
    with pytest.raises(SearchLogError, match=r"early-rejected\) must be a boolean"):
        read_search_log(path)
