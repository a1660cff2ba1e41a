"""The recomputation move: it switches an op and a run after it, never a graph input,
keeps splits as they are; a search under a memory budget that no split can meet (one
device) meets it by recomputing; inference and logs from before make no such move. A
search's optimizer (whose state memory holds) is in its options and its log."""

import random

import pytest

from flextui.cost import AnalyticCostModel
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import FlextuiError
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions, read_search_log, run_search
from flextui.search.mcmc import Chain
from flextui.search.recompute import recompute_run
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy


def mlp():
    """Activations (34.7 MB) outweigh the weights (13.7 MB) at this batch."""
    return load_model("mlp", batch_size=1024, in_features=256, width=1024, layers=4,
                      num_classes=10)


def test_a_run_switches_each_op_once_keeping_its_split_and_never_an_input():
    graph, cluster = mlp(), load_named_cluster("local-cpu-2")
    base = builtin_strategy("data-parallel", graph, cluster)
    first = graph.ops[0]
    assert first.type == "input"
    for seed in range(20):
        changes = recompute_run(graph, first, base, random.Random(seed), 0.75)
        names = [op.name for op, _ in changes]
        assert len(names) == len(set(names)) and first.name not in names
        for op, config in changes:
            assert config.recompute and config.with_recompute(False) == base[op.name]
            assert op.type != "input"
    # every op of the chain, with a walk that always goes on
    everything = recompute_run(graph, graph.ops[1], base, random.Random(0), 1.0)
    assert len(everything) == sum(op.type != "input" for op in graph.ops[1:])
    undone = base.replace_all({op.name: c for op, c in everything})
    back = recompute_run(graph, graph.ops[1], undone, random.Random(0), 1.0)
    assert all(not c.recompute for _, c in back) and len(back) == len(everything)


def test_a_budget_no_split_can_meet_is_met_by_recomputing():
    graph, cluster = mlp(), load_named_cluster("local-cpu-1")
    sim = Simulator(graph, cluster, AnalyticCostModel())
    kept = sim.simulate(builtin_strategy("data-parallel", graph, cluster))
    peak = kept.devices[0].memory.total
    budget = int(peak * 0.8)
    # (pipeline moves off: 1F1B micro-batches meet it too, tests/test_search_pipeline.py)
    result = run_search(graph, cluster, AnalyticCostModel(),
                        SearchOptions(iterations=2000, seed=0, memory_budget=budget,
                                      pipeline=0.0))
    found = sim.simulate(result.best)
    assert found.devices[0].memory.total <= budget < peak
    assert any(c.recompute for c in result.best.values())
    assert found.makespan > kept.makespan   # bought with time
    assert result.fastest_within(budget) is not None


def test_without_recomputation_one_device_has_nothing_to_search():
    graph, cluster = mlp(), load_named_cluster("local-cpu-1")
    for options in (SearchOptions(iterations=10, recompute=0.0),
                    SearchOptions(iterations=10, training=False)):
        with pytest.raises(FlextuiError, match="has one device"):
            run_search(graph, cluster, AnalyticCostModel(), options)


def test_options_from_a_log_from_before_make_no_recomputation_moves():
    old = SearchOptions().to_dict()
    del old["recompute"]
    assert SearchOptions.from_dict(old, "log").recompute == 0.0


def test_a_search_with_adamw_counts_its_state_and_its_log_says_so(tmp_path):
    graph, cluster = mlp(), load_named_cluster("local-cpu-2")
    options = SearchOptions(iterations=50, seed=0, optimizer=OptimizerKind.ADAMW)
    result = run_search(graph, cluster, AnalyticCostModel(), options,
                        log_path=tmp_path / "run.ffsearch")
    log = read_search_log(tmp_path / "run.ffsearch")
    assert log.header.options.optimizer is OptimizerKind.ADAMW
    adamw = Simulator(graph, cluster, AnalyticCostModel(), optimizer=OptimizerKind.ADAMW)
    assert adamw.simulate(result.best).cost == result.best_cost
    old = options.to_dict()
    del old["optimizer"]   # a log from before: SGD, as it ran
    assert SearchOptions.from_dict(old, "log").optimizer is OptimizerKind.SGD


def test_with_memory_to_spare_the_search_never_recomputes():
    """Recomputing only costs time where everything fits: no such move is made (the
    same chain under a budget that data parallelism exceeds makes them)."""
    graph, cluster = mlp(), load_named_cluster("local-cpu-2")
    start = builtin_strategy("data-parallel", graph, cluster)
    roomy = Chain(0, graph, cluster, AnalyticCostModel(), SearchOptions(seed=0), start)
    events = [roomy.step() for _ in range(300)]
    assert not any(c.recompute for e in events for _, c in e.changes)
    peak = max(u.total for u in roomy.sim.memory.usage())
    tight = Chain(0, graph, cluster.with_memory_limit(peak // 2), AnalyticCostModel(),
                  SearchOptions(seed=0), start)
    events = [tight.step() for _ in range(300)]
    assert any(c.recompute for e in events for _, c in e.changes)
