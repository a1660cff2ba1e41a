"""The strategies every search is measured against, data parallelism and the expert
strategy: their simulated costs, simulated as the search simulates."""

from __future__ import annotations

from flextui.cost.model import CostModel
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.options import SearchOptions
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy

#: the built-in strategies a search starts from with ``--init auto`` and reports against
BASELINES = ("data-parallel", "expert")


def search_simulator(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                     options: SearchOptions) -> Simulator:
    """A simulator that simulates as the search does (same training mode, memory policy,
    memory budget and optimizer): what its costs and timelines are to be compared with."""
    if options.memory_budget:
        cluster = cluster.with_memory_limit(options.memory_budget)
    return Simulator(graph, cluster, cost_model, options.training, options.memory,
                     options.optimizer)


def baseline_costs(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                   options: SearchOptions) -> dict[str, float]:
    """The simulated cost of each of the ``BASELINES``, by name, in that order."""
    simulator = search_simulator(graph, cluster, cost_model, options)
    return {name: simulator.simulate(builtin_strategy(name, graph, cluster).with_precision(
        options.precision)).cost for name in BASELINES}


def fastest_baseline(costs: dict[str, float]) -> str:
    """The name of the cheapest baseline (the first listed, on a tie)."""
    return min(costs, key=costs.__getitem__)
