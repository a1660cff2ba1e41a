"""The MCMC search: the acceptance rule, reproducibility, stop rules, restarts, workers,
logging and resume."""

import dataclasses
import threading

import pytest

from flextui.cost import AnalyticCostModel
from flextui.search import RestartEvent, SearchOptions, read_search_log, run_search
from flextui.search.chains import drive
from flextui.search.events import StepEvent
from flextui.search.mcmc import Chain
from flextui.sim import Simulator
from flextui.strategy import builtin_strategy, data_parallel
from helpers import four_gpus, model


def lenet_chain(**options):
    graph, cluster = model("lenet"), four_gpus()
    opts = SearchOptions(**options)
    return Chain(0, graph, cluster, AnalyticCostModel(), opts, data_parallel(graph, cluster))


def search(name="lenet", cluster=None, **options):
    graph, cluster = model(name), cluster or four_gpus()
    return run_search(graph, cluster, AnalyticCostModel(), SearchOptions(**options))


def test_metropolis_rule():
    greedy = lenet_chain(beta=1e9)
    for _ in range(150):
        before = greedy.current_cost
        e = greedy.step()
        assert e.accepted == (e.proposed <= before)
        assert e.current == (e.proposed if e.accepted else before)
    # beta > 0 (its rule everywhere): accepts everything but a worse pipeline (a guarded
    # pipeline move is taken only when it pays)
    walker = lenet_chain(beta=1e-300)
    for _ in range(100):
        before = walker.current_cost
        e = walker.step()
        assert e.accepted or (e.pipeline is not None and e.proposed > before)


def test_best_is_exact_and_never_worse_than_the_start():
    chain = lenet_chain(seed=3)
    events = [chain.step() for _ in range(300)]
    assert chain.best_cost <= chain.initial_cost
    assert [e.best for e in events] == sorted((e.best for e in events), reverse=True)
    simulator = Simulator(chain.graph, four_gpus(), AnalyticCostModel())
    assert simulator.simulate(chain.best).cost == chain.best_cost
    assert simulator.simulate(chain.sim.strategy).cost == chain.current_cost


def test_same_seed_same_run_different_seed_different_run():
    def run(seed):
        chain = lenet_chain(seed=seed)
        return [dataclasses.replace(chain.step(), elapsed=0) for _ in range(200)]
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_early_rejection_makes_the_same_moves_and_decisions():
    def run(early):
        chain = lenet_chain(seed=4, early_reject=early)
        return [chain.step() for _ in range(300)]
    on, off = run(True), run(False)
    assert [(e.changes, e.accepted, e.current, e.best) for e in on] == \
        [(e.changes, e.accepted, e.current, e.best) for e in off]
    assert any(e.early for e in on) and not any(e.early for e in off)
    for e, f in zip(on, off):
        if e.early:   # rejected on a lower bound of the cost the full simulation gives
            assert not e.accepted and e.proposed <= f.proposed
        else:
            assert e.proposed == f.proposed


def test_a_step_past_the_time_budget_is_abandoned_and_the_chain_stops_on_time(monkeypatch):
    chain = lenet_chain(seed=2)
    for _ in range(5):
        chain.step()
    abandoned = 0
    for _ in range(20):   # a step whose move changes nothing simulates nothing
        strategy, iteration = chain.sim.strategy, chain.iteration
        try:
            chain.step(deadline=0.0)
        except TimeoutError:
            abandoned += 1
            assert (chain.sim.strategy, chain.iteration) == (strategy, iteration)
    assert abandoned
    iteration = chain.iteration
    # drive hands the chain the budget's end; a step still running then ends the chain
    monkeypatch.setattr("flextui.search.chains._deadline", lambda chain, options: 0.0)
    emitted = []
    reason = drive(chain, SearchOptions(time_limit=1e6), lambda: False, emitted.extend)
    steps = [item for item in emitted if isinstance(item, StepEvent)]
    assert reason == "time" and chain.iteration == iteration + len(steps)
    assert isinstance(emitted[-1], tuple)   # the final checkpoint; the abandoned step not


def test_iteration_budget_and_result():
    result = search(iterations=250, converge=False, seed=5)
    assert result.reason == "iterations" and result.iterations == 250
    again = search(iterations=250, converge=False, seed=5)
    assert again.best == result.best and again.best_cost == result.best_cost
    simulator = Simulator(model("lenet"), four_gpus(), AnalyticCostModel())
    builtins = [simulator.simulate(builtin_strategy(name, model("lenet"), four_gpus())).cost
                for name in ("data-parallel", "expert")]
    assert result.best_cost <= result.initial_cost == min(builtins)


def test_converges_in_iterations_reproducibly():
    a = search(iterations=100_000, min_steps=50, seed=2)
    b = search(iterations=100_000, min_steps=50, seed=2)
    assert a.reason == "converged" and a.iterations < 100_000
    assert (a.iterations, a.best_cost) == (b.iterations, b.best_cost)


def test_time_budget_and_stop_event():
    result = search(time_limit=0.5, converge=False)
    assert result.reason == "time" and 0.5 <= result.elapsed < 3
    stop = threading.Event()
    seen = []

    def on_events(events):
        seen.extend(events)
        if len(seen) >= 20:
            stop.set()
    graph, cluster = model("lenet"), four_gpus()
    result = run_search(graph, cluster, AnalyticCostModel(), SearchOptions(converge=False),
                        on_events=on_events, stop=stop)
    assert result.reason == "interrupted" and result.iterations == len(seen)
    assert [e.iteration for e in seen] == list(range(1, len(seen) + 1))


def test_restart_goes_back_to_the_best():
    chain = lenet_chain(beta=1e-300, restart_every=10, seed=4)
    restarts = 0
    for _ in range(100):
        chain.step()
        if chain.restart_due():
            event = chain.restart()
            assert event == RestartEvent(0, chain.iteration)
            assert chain.current_cost == chain.best_cost and chain.sim.strategy == chain.best
            restarts += 1
    assert restarts > 0


def test_frontier_is_pareto_and_memory_budget_pick():
    result = search(iterations=300, converge=False, seed=1)
    points = result.frontier
    assert points
    for p in points:
        assert not any(q.time <= p.time and q.memory <= p.memory and (q.time, q.memory) !=
                       (p.time, p.memory) for q in points)
    smallest = min(p.memory for p in points)
    assert result.fastest_within(smallest).memory == smallest
    assert result.fastest_within(smallest - 1) is None


def test_workers_give_the_same_chains_as_one_process():
    parallel = search(iterations=120, converge=False, chains=2, seed=7, init="data-parallel")
    assert parallel.iterations == 240 and len(parallel.chains) == 2
    for c in parallel.chains:
        alone = lenet_chain(iterations=120, converge=False, chains=2, seed=7)
        alone.index = c.chain
        alone.rng.seed(f"flextui-search:7:{c.chain}")
        for _ in range(120):
            alone.step()
        assert (alone.best_cost, alone.best) == (c.best_cost, c.best)
    assert parallel.best_cost == min(c.best_cost for c in parallel.chains)


def test_log_records_the_run(tmp_path):
    graph, cluster = model("lenet"), four_gpus()
    path = tmp_path / "run.ffsearch"
    result = run_search(graph, cluster, AnalyticCostModel(),
                        SearchOptions(iterations=200, converge=False, restart_every=50),
                        log_path=path)
    log = read_search_log(path)
    assert log.final is not None and log.final.best_cost == result.best_cost
    assert log.final.best == result.best and not log.truncated
    assert len(log.steps) == 200 and log.header.graph.fingerprint == graph.fingerprint
    assert any(s.early and not s.accepted for s in log.steps)   # marked, read back
    assert log.best_strategy() == (result.best, result.best_cost)
    last = log.last_checkpoint(0)
    assert last.iteration == 200
    assert log.strategy_at(0, 200) == last.current


@pytest.mark.parametrize("cut", ["clean", "torn"])
def test_resume_gives_the_uninterrupted_result(tmp_path, cut):
    graph, cluster = model("lenet"), four_gpus()
    options = SearchOptions(iterations=400, converge=False, seed=9, restart_every=60)
    whole = run_search(graph, cluster, AnalyticCostModel(), options)

    path = tmp_path / "run.ffsearch"
    stop = threading.Event()
    run_search(graph, cluster, AnalyticCostModel(), options, log_path=path, stop=stop,
               on_events=lambda events: events[-1].iteration >= 150 and stop.set())
    data = path.read_bytes()
    log = read_search_log(path)
    # drop the final record (as if killed), and for "torn" also half of the record before
    final_at = log.record_offsets[-1]
    keep = final_at if cut == "clean" else final_at - 7
    path.write_bytes(data[:keep])
    log = read_search_log(path)
    assert log.final is None and log.truncated == (cut == "torn")
    resumed = run_search(log.header.graph, log.header.cluster, AnalyticCostModel(), options,
                         resume=log)
    assert (resumed.best_cost, resumed.best) == (whole.best_cost, whole.best)
    assert resumed.iterations == 400
    final = read_search_log(path)
    assert final.final is not None and final.final.best_cost == whole.best_cost
    assert [e.iteration for e in final.steps_of(0)] == list(range(1, len(final.steps) + 1))
