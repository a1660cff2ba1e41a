"""Propagation moves: which config a neighbour adopts, the walk, and that with them the
MCMC search reaches LeNet's proven optimum (which one-op moves alone never did)."""

import random

import pytest

from flextui.cost import AnalyticCostModel
from flextui.search import SearchOptions, run_search
from flextui.search.propagate import adopted_config, propagation
from flextui.sim import Simulator
from flextui.strategy import ParallelConfig, Strategy, data_parallel, random_strategy
from helpers import assert_multi_op_steps_replay, four_gpus, model


def lenets_optimum(graph):
    """LeNet's optimum on 4 P100s, its gradients summed in buckets: the convolutions data
    parallel over the four GPUs, the fully connected layers over two of them; the
    exhaustive search proves it (``exhaustive_search``, 193 s on this project's 2-core
    machine)."""
    def config(op):
        if op.name == "labels":
            return ParallelConfig((1,), (0,))
        if op.name in ("fc1", "unary_3", "fc2", "unary_4", "fc3", "loss"):
            return ParallelConfig((2,) + (1,) * (len(op.space) - 1), (1, 2))
        return ParallelConfig((4,) + (1,) * (len(op.space) - 1), (0, 1, 2, 3))
    return Strategy({op.name: config(op) for op in graph.ops})


def test_same_rank_keeps_degrees_and_devices():
    g = model("lenet")
    conv1, relu = g.op("conv1"), g.op("unary_1")
    config = ParallelConfig((2, 3, 1, 1), (0, 1, 2, 3, 4, 5))
    assert adopted_config(config, conv1, relu) == config


def test_a_degree_the_neighbour_cannot_take_is_refused():
    g = model("lenet")
    # pool2's height is 5: a 2-way height split does not divide it
    assert adopted_config(ParallelConfig((1, 1, 2, 1), (0, 1)), g.op("unary_2"), g.op("pool2")) \
        is None


def test_across_ranks_only_sample_splits_carry_over():
    g = model("lenet")
    pool2, flatten, fc1 = g.op("pool2"), g.op("flatten"), g.op("fc1")
    assert adopted_config(ParallelConfig((4, 1, 1, 1), (0, 1, 2, 3)), pool2, flatten) == \
        ParallelConfig((4, 1), (0, 1, 2, 3))
    assert adopted_config(ParallelConfig((1, 2, 1, 1), (0, 1)), pool2, flatten) is None
    assert adopted_config(ParallelConfig((1, 1, 1, 1), (3,)), pool2, fc1) == \
        ParallelConfig((1, 1), (3,))


@pytest.mark.parametrize("name", ["lenet", "inception_v3", "rnnlm2", "transformer"])
def test_a_walk_gives_other_ops_valid_configs_on_the_same_devices(name):
    g, where = model(name), four_gpus()
    rng = random.Random(3)
    for _ in range(40):
        strategy = random_strategy(g, where, seed=rng.randrange(10**6))
        start = rng.choice(g.ops)
        changes = propagation(g, start, strategy, rng, continue_chance=0.9)
        changed = [op.index for op, _ in changes]
        assert len(set(changed)) == len(changed) and start.index not in changed
        for op, config in changes:
            config.check(op, where.num_devices)
            assert config != strategy[op.name]
            assert config.devices == strategy[start.name].devices


def test_no_walk_from_an_op_whose_neighbours_already_agree():
    g = model("lenet")
    dp = data_parallel(g, four_gpus())
    for op in g.ops:
        assert propagation(g, op, dp, random.Random(0), continue_chance=1.0) == []


def test_mcmc_with_propagation_reaches_lenets_optimum():
    """From data parallelism, each of 3 chains (seed 2 is the slowest: 16,000 steps do
    not reach it, 32,000 do)."""
    g, where = model("lenet"), four_gpus()
    optimum = Simulator(g, where, AnalyticCostModel()).simulate(lenets_optimum(g)).cost
    for seed in range(3):
        result = run_search(g, where, AnalyticCostModel(),
                            SearchOptions(iterations=32_000, seed=seed, converge=False))
        assert result.best_cost == pytest.approx(optimum, rel=1e-12)


def test_propagated_steps_replay_from_the_log(tmp_path):
    g, where = model("lenet"), four_gpus()
    path = tmp_path / "run.ffsearch"
    run_search(g, where, AnalyticCostModel(),
               SearchOptions(iterations=300, seed=2, converge=False, propagation=0.5),
               log_path=path)
    assert_multi_op_steps_replay(path, g, where, AnalyticCostModel())
