"""The search's pipeline moves: micro-batches and schedules proposed beside the other
moves, simulated in full, logged and replayed; stage moves put runs of layers on device
groups; a search started in micro-batches keeps every split a micro-batch allows; a
memory budget no split can meet on one device is met by 1F1B's micro-batches."""

import random

import pytest

from flextui.cost import AnalyticCostModel
from flextui.machine import load_named_cluster
from flextui.search import read_search_log
from flextui.search.log import step_strategy
from flextui.search.mcmc import Chain
from flextui.search.options import SearchOptions
from flextui.search.pipeline import fitted, on_group, pipeline_move, stage_run
from flextui.search.runner import run_search
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy
from flextui.strategy.pipeline import Pipeline, Schedule, micro_refusal
from helpers import model
from test_search_recompute import mlp as activation_heavy_mlp

GRAPH = model("mlp")
CLUSTER = load_named_cluster("p100-4x4", nodes=1)


def test_pipeline_steps_are_logged_and_replay_to_their_costs(tmp_path):
    path = tmp_path / "run.ffsearch"
    run_search(GRAPH, CLUSTER, AnalyticCostModel(),
               SearchOptions(iterations=300, seed=3, converge=False, pipeline=0.3,
                             init="model-parallel"), log_path=path)
    log = read_search_log(path)
    moves = [e for e in log.steps_of(0) if e.pipeline is not None]
    assert any(e.accepted and e.pipeline.on for e in moves)
    assert {e.pipeline.schedule for e in moves} == set(Schedule)
    simulator = Simulator(GRAPH, CLUSTER, AnalyticCostModel())
    for e in moves[:8]:
        before = log.strategy_at(0, e.iteration - 1)
        proposed = step_strategy(GRAPH, before, e)
        assert proposed.pipeline == e.pipeline
        assert simulator.simulate(proposed).cost == pytest.approx(e.proposed, rel=1e-12)
        after = log.strategy_at(0, e.iteration)
        assert after == (proposed if e.accepted else before)
    best, _ = log.best_strategy()
    assert best == log.final.best


def test_a_chain_in_micro_batches_proposes_only_splits_they_allow():
    """Started in 8 micro-batches (data parallelism's 4-way sample splits lowered where
    a micro-batch of the batch does not allow them), every strategy a chain accepts
    still splits each micro-batch evenly."""
    options = SearchOptions(iterations=200, seed=0, converge=False, microbatches=8,
                            schedule=Schedule.ONE_F_ONE_B, pipeline=0.0)
    start = fitted(GRAPH, builtin_strategy("data-parallel", GRAPH, CLUSTER),
                   Pipeline(8, Schedule.ONE_F_ONE_B))
    chain = Chain(0, GRAPH, CLUSTER, AnalyticCostModel(), options, start)
    for _ in range(200):
        chain.step()
        current = chain.sim.strategy
        assert current.pipeline == Pipeline(8, Schedule.ONE_F_ONE_B)
        assert all(micro_refusal(op, current[op.name], 8) is None for op in GRAPH.ops)


def test_fitted_lowers_only_the_sample_splits_a_micro_batch_does_not_allow():
    dp = builtin_strategy("data-parallel", GRAPH, CLUSTER)   # 4 blocks of the batch
    batch = GRAPH.batch_size
    cut = fitted(GRAPH, dp, Pipeline(batch // 2, Schedule.GPIPE))
    for op in GRAPH.ops:
        assert micro_refusal(op, cut[op.name], batch // 2) is None
        assert cut[op.name].num_tasks in (1, 2)
    assert fitted(GRAPH, dp, Pipeline(2)) == dp.with_pipeline(Pipeline(2))
    with pytest.raises(Exception, match="do not divide the batch"):
        fitted(GRAPH, dp, Pipeline(batch * 2))


def test_a_stage_move_puts_a_run_of_layers_on_one_device_group():
    dp = builtin_strategy("data-parallel", GRAPH, CLUSTER)
    layers = list(dict.fromkeys(o.layer for o in GRAPH.ops))
    rng = random.Random(5)
    seen = set()
    for _ in range(30):
        op = rng.choice(GRAPH.ops)
        changes = stage_run(GRAPH, op, dp, CLUSTER.num_devices, rng, 0.5)
        groups = {c.distinct_devices for _, c in changes}
        assert len(groups) <= 1
        moved = sorted({layers.index(o.layer) for o, _ in changes})
        assert not moved or (moved[0] >= layers.index(op.layer)
                             and moved == list(range(moved[0], moved[-1] + 1)))
        for o, c in changes:
            c.check(o, CLUSTER.num_devices)
        seen |= groups
    assert len(seen) > 2   # groups of several sizes and places
    fc = GRAPH.ops[1]
    assert on_group(fc, dp[fc.name], (2, 3), 1).devices == (2, 3)


def test_a_pipeline_move_changes_the_micro_batches_or_the_schedule():
    mp = builtin_strategy("model-parallel", GRAPH, CLUSTER)
    rng = random.Random(0)
    moves = [pipeline_move(GRAPH, mp.with_pipeline(Pipeline(4)), rng) for _ in range(40)]
    assert Pipeline(4, Schedule.ONE_F_ONE_B) in moves
    assert any(m.microbatches != 4 and m.schedule == Schedule.GPIPE for m in moves)
    one = load_named_cluster("local-cpu-1")
    assert pipeline_move(GRAPH, builtin_strategy("data-parallel", GRAPH, one),
                         random.Random(1)).microbatches > 1
    # from one micro-batch: the strategy's schedule, or (greedy moves) either
    rng = random.Random(0)
    assert {pipeline_move(GRAPH, mp, rng).schedule for _ in range(20)} == {Schedule.GPIPE}
    assert {pipeline_move(GRAPH, mp, rng, draw_schedule=True).schedule
            for _ in range(20)} == set(Schedule)


def test_a_budget_no_split_meets_on_one_device_is_met_by_micro_batches():
    """On one device nothing can be split; with recomputation and sharding off, 1F1B's
    micro-batches (one in flight) are what brings the activations under the budget."""
    graph, cluster = activation_heavy_mlp(), load_named_cluster("local-cpu-1")
    sim = Simulator(graph, cluster, AnalyticCostModel())
    peak = sim.simulate(builtin_strategy("data-parallel", graph, cluster)).devices[0] \
        .memory.total
    budget = int(peak * 0.8)
    result = run_search(graph, cluster, AnalyticCostModel(),
                        SearchOptions(iterations=600, seed=0, memory_budget=budget,
                                      recompute=0.1, pipeline=0.2))
    found = sim.simulate(result.best)
    assert found.devices[0].memory.total <= budget
    assert result.best.pipeline.on and not any(c.recompute for c in result.best.values())


def test_options_from_a_log_from_before_make_no_pipeline_or_stage_moves():
    old = SearchOptions().to_dict()
    for key in ("pipeline", "stage", "microbatches", "schedule", "guarded_pipeline"):
        del old[key]
    options = SearchOptions.from_dict(old, "log")
    assert (options.pipeline, options.stage, options.microbatches) == (0.0, 0.0, 1)
    # a log from before guarded pipeline moves ran the moves as first built
    assert not options.guarded_pipeline and SearchOptions().guarded_pipeline


@pytest.mark.parametrize("greedy", [True, False])
def test_a_guarded_pipeline_move_is_never_taken_uphill(tmp_path, greedy):
    """MCMC takes a worse proposal now and then; a worse pipeline (whose delta
    proposals re-time every micro-batch's tasks) only with guarded pipeline moves off."""
    path = tmp_path / "run.ffsearch"
    run_search(GRAPH, CLUSTER, AnalyticCostModel(),
               SearchOptions(iterations=300, seed=3, converge=False, pipeline=0.3,
                             init="model-parallel", guarded_pipeline=greedy), log_path=path)
    steps = list(read_search_log(path).steps_of(0))
    moves = uphill_taken = 0
    for before, e in zip(steps, steps[1:]):
        if e.pipeline is not None:
            moves += 1
            uphill_taken += e.accepted and e.proposed > before.current
    assert moves and bool(uphill_taken) != greedy


def test_a_guarded_pipeline_move_keeps_the_task_graph_under_its_cap(monkeypatch):
    """A pipeline move's full simulation builds every micro-batch's tasks: a guarded
    one proposes no more micro-batches than keep them under MAX_PIPELINE_TASKS."""
    options = SearchOptions(iterations=100, seed=0, converge=False, pipeline=1.0,
                            init="model-parallel")
    chain = Chain(0, GRAPH, CLUSTER, AnalyticCostModel(), options,
                  builtin_strategy("model-parallel", GRAPH, CLUSTER))
    tg = chain.sim.tg
    tasks = sum(map(len, tg.forward.values())) + sum(map(len, tg.backward.values()))
    monkeypatch.setattr("flextui.search.mcmc.MAX_PIPELINE_TASKS", 4 * tasks)
    proposed = {chain.step().pipeline for _ in range(100)} - {None}
    assert proposed and max(p.microbatches for p in proposed) <= 4
    unguarded = Chain(0, GRAPH, CLUSTER, AnalyticCostModel(),
                      options.with_changes(guarded_pipeline=False),
                      builtin_strategy("model-parallel", GRAPH, CLUSTER))
    assert max(p.microbatches for p in {unguarded.step().pipeline for _ in range(100)} - {None}) > 4
