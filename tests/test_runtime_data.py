"""A model file's dataset(): what a launch trains on, in the documented order, equal to
a plain PyTorch loop over the same items (tests/data_loop.py); each rank reads only its
sample blocks' items; an item that does not fit the graph's inputs is one message."""

from pathlib import Path

import pytest
import torch

from data_loop import plain_losses
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.runtime.comm import Comm
from flextui.runtime.data import rank_feed
from flextui.runtime.datafeed import DataFeed, DataSource
from flextui.runtime.engine import RankProgram
from flextui.runtime.plan import compile_plan
from flextui.runtime.spec import LaunchSpec, Training
from flextui.strategy import builtin_strategy
from flextui.strategy.builtins import random_strategy
from runtime_models import on_one_rank

MODELS = Path(__file__).with_name("torch_models")
DIGITS = MODELS / "perceptron_data.py"


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("partition", ["data-parallel", "random"])
def test_a_rank_program_trains_on_the_dataset_as_a_plain_loop(partition, shuffle):
    """Every block of a partition (samples and features split) on one rank: the 5
    steps of batch 8 the 40 items make."""
    graph = load_model(str(DIGITS))
    cluster = load_named_cluster("local-cpu-4")
    split = builtin_strategy("data-parallel", graph, cluster) if partition == "data-parallel" \
        else random_strategy(graph, cluster, seed=3)
    strategy = on_one_rank(split)
    training = Training(steps=5, warmup=0, seed=5, data=DataFeed(DataSource.DATASET, shuffle))
    spec = LaunchSpec(graph, strategy, 1, training)
    plan = compile_plan(graph, strategy, 1)
    cpu = torch.device("cpu")
    program = RankProgram(plan, 0, Comm(0, [], cpu), seed=5, dtype=torch.float64,
                          data=rank_feed(spec, plan, 0, torch.float64, cpu))
    losses = [program.step(step).loss_share for step in range(5)]
    assert losses == pytest.approx(plain_losses(DIGITS, 5, 8, seed=5, shuffle=shuffle),
                                   rel=1e-9)
