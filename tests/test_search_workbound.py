"""The compute-work lower bound: below every strategy's simulated time, and close to
data parallelism's where that is compute-bound (so a search has little to find)."""

import pytest

from flextui.cost import AnalyticCostModel
from flextui.machine import load_named_cluster
from flextui.search.compute_bound import work_lower_bound
from flextui.sim import Simulator
from flextui.strategy import data_parallel, expert, model_parallel, random_strategy
from helpers import model


@pytest.mark.parametrize("name", ["lenet", "rnnlm2", "alexnet", "inception_v3"])
@pytest.mark.parametrize("training", [True, False])
def test_no_strategy_simulates_below_the_bound(name, training):
    g, where = model(name), load_named_cluster("p100-4x4", nodes=1)
    bound = work_lower_bound(g, where, AnalyticCostModel(), training)
    simulator = Simulator(g, where, AnalyticCostModel(), training=training)
    strategies = [data_parallel(g, where), expert(g, where), model_parallel(g, where)]
    strategies += [random_strategy(g, where, seed) for seed in range(5)]
    for strategy in strategies:
        assert simulator.simulate(strategy).cost >= bound > 0


def test_compute_bound_data_parallelism_is_within_a_few_percent_of_it():
    g, where = model("inception_v3", batch_size=256), load_named_cluster("p100-4x4", nodes=1)
    bound = work_lower_bound(g, where, AnalyticCostModel())
    dp = Simulator(g, where, AnalyticCostModel()).simulate(data_parallel(g, where)).cost
    assert bound <= dp < 1.02 * bound


def test_four_times_the_devices_about_quarter_it():
    g, cost = model("alexnet"), AnalyticCostModel()
    one, four = (work_lower_bound(g, load_named_cluster("p100-4x4", nodes=n), cost) for n in (1, 4))
    assert four == pytest.approx(one / 4, rel=0.01)
