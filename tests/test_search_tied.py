"""Tied moves: which ops share weights, that a tied step sets them all alike (and is
simulated, logged and replayed exactly), and that with tied moves the search finds an
unrolled RNN's layer-wise strategies that one-op moves do not reach."""

import functools

import pytest

from flextui.cost import AnalyticCostModel
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions, read_search_log, run_search
from flextui.search.mcmc import Chain
from flextui.search.tied import tied_groups
from flextui.sim import Simulator
from flextui.strategy import data_parallel
from helpers import assert_multi_op_steps_replay, model


@functools.cache
def eight_gpus():
    return load_named_cluster("p100-4x4", nodes=2)


def small_rnnlm():
    return load_model("rnnlm", steps=3, hidden=512)


def test_an_unrolled_layer_is_one_group_per_layer():
    g = model("rnnlm2")
    groups = tied_groups(g)
    for layer in ("embed", "lstm0", "lstm1", "logits"):
        assert [o.name for o in groups[g.op(f"step0.{layer}").index]] == [f"step1.{layer}"]
        assert [o.name for o in groups[g.op(f"step1.{layer}").index]] == [f"step0.{layer}"]
    # ops without weights (inputs, the loss) have no twins
    assert {g.ops[i].type for i in groups} == {"embedding", "lstm_cell", "linear"}


def test_graphs_without_shared_weights_have_no_groups():
    assert tied_groups(model("lenet")) == {}
    assert tied_groups(model("inception_v3")) == {}


def test_tied_steps_set_every_twin_and_the_delta_cost_is_exact():
    g, where = small_rnnlm(), eight_gpus()
    options = SearchOptions(iterations=200, seed=1, converge=False, tied=1.0, propagation=0.0,
                            stage=0.0, pipeline=0.0)
    chain = Chain(0, g, where, AnalyticCostModel(), options, data_parallel(g, where))
    groups = tied_groups(g)
    full = Simulator(g, where, AnalyticCostModel())
    tied_steps = 0
    for _ in range(200):
        before = chain.sim.strategy
        event = chain.step()
        twins = groups.get(event.op, ())
        for twin in twins:
            if before[twin.name] != event.config:
                assert (twin.index, event.config) in event.others
        assert {o for o, _ in event.others} <= {t.index for t in twins}
        tied_steps += bool(event.others)
        cost = full.simulate(before.replace_all({g.ops[o].name: c
                                                 for o, c in event.changes})).cost
        if event.early:   # rejected on a lower bound
            assert event.proposed <= cost and not event.accepted
        else:
            assert event.proposed == pytest.approx(cost, rel=1e-12)
    assert tied_steps > 20


def test_tied_steps_replay_from_the_log(tmp_path):
    g, where = small_rnnlm(), eight_gpus()
    path = tmp_path / "run.ffsearch"
    run_search(g, where, AnalyticCostModel(),
               SearchOptions(iterations=150, seed=0, converge=False, tied=1.0), log_path=path)
    assert read_search_log(path).header.options.tied == 1.0
    assert_multi_op_steps_replay(path, g, where, AnalyticCostModel(), count=5)


def test_tied_moves_find_layer_wise_strategies_one_op_moves_miss():
    """On 8 GPUs a 3-step RNNLM's best strategies move whole layers (the embedding and
    softmax off the all-reduce); within 300 proposals from data parallelism every seed
    with tied moves beats every seed without them (from data parallelism, and with no
    stage or pipeline moves, which also move whole layers, so that what is compared is
    the tied moves against one-op moves, not the expert strategy a search may start
    from)."""
    g, where = small_rnnlm(), eight_gpus()

    def best(tied, seed):
        return run_search(g, where, AnalyticCostModel(),
                          SearchOptions(iterations=300, seed=seed, converge=False,
                                        tied=tied, init="data-parallel", stage=0.0,
                                        pipeline=0.0)).best_cost

    with_tied = [best(0.5, seed) for seed in range(3)]
    without = [best(0.0, seed) for seed in range(3)]
    assert max(with_tied) < 0.8 * min(without)


def test_a_log_from_before_tied_moves_resumes_without_them(tmp_path):
    """Its steps were drawn with no tied moves: resuming with them would not continue
    the same chain."""
    from flextui.search.logformat import TAG_HEADER, decode_header

    g, where = model("rnnlm2"), load_named_cluster("p100-4x4", nodes=1)
    path = tmp_path / "run.ffsearch"
    run_search(g, where, AnalyticCostModel(), SearchOptions(iterations=5, seed=0), log_path=path)
    header = read_search_log(path).header
    fields = {"version": 2, "flextui": header.flextui_version, "created": header.created,
              "graph": g.to_dict(), "graph_hash": g.fingerprint, "cluster": where.to_dict(),
              "cluster_hash": where.fingerprint, "cost_model": header.cost_model, "seed": 0}
    options = {k: v for k, v in header.options.to_dict().items() if k != "tied"}
    assert decode_header(path, [TAG_HEADER, {**fields, "options": options}]).options.tied == 0.0
    assert decode_header(path, [TAG_HEADER, {**fields, "options": {**options, "tied": 0.5}}]
                         ).options.tied == 0.5
