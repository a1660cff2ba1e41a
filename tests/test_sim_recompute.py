"""Recomputation in the simulator and the strategy file: a recomputed op's backward task
re-runs its forward first (its time added) and the op keeps no activation (its outputs
dropped from its device's memory), hand-computed; the file's ``"recompute": true``."""

import json

import pytest

from flextui.errors import StrategyError
from flextui.graph import GraphBuilder
from flextui.sim import Simulator
from flextui.strategy import load_strategy, save_strategy
from helpers import line_cluster
from test_sim_full import FixedCost, place, same, times


def chain():
    g = GraphBuilder("chain")
    g.relu(g.linear(g.input((4, 8), name="x"), 8, name="fc"), name="act")
    return g.build()


def recomputing(strategy, *names):
    return strategy.replace_all({n: strategy[n].with_recompute(True) for n in names})


def test_a_recomputed_op_adds_its_forward_to_its_backward_and_keeps_nothing():
    graph = chain()
    sim = Simulator(graph, line_cluster(1), FixedCost())
    kept = place(graph, dict(x=0, fc=0, act=0))
    before, after = sim.simulate(kept), sim.simulate(recomputing(kept, "fc"))
    compute, _ = times(after)
    # forward 1 s and backward 2 s a task (FixedCost): fc's backward is 1 + 2 s
    assert same(compute, {("fc", "FORWARD"): (0, 1), ("act", "FORWARD"): (1, 2),
                          ("act", "BACKWARD"): (2, 4), ("fc", "BACKWARD"): (4, 7)})
    assert (before.makespan, after.makespan) == (7.0, 8.0)  # + two 0.5 s updates
    # activations: the input's, fc's and act's outputs, 4 x 8 float32 = 128 bytes each;
    # recomputed, fc's are not kept
    assert before.devices[0].memory.activations == 3 * 128
    assert after.devices[0].memory.activations == 2 * 128
    both = sim.simulate(recomputing(kept, "fc", "act"))
    assert both.makespan == 9.0 and both.devices[0].memory.activations == 128


def test_a_recomputed_consumer_keeps_the_block_it_received():
    g = GraphBuilder("two")
    g.linear(g.linear(g.input((4, 8), name="x"), 8, name="a"), 8, name="b")
    graph = g.build()
    sim = Simulator(graph, line_cluster(2), FixedCost())
    timeline = sim.simulate(recomputing(place(graph, dict(x=0, a=0, b=1)), "b"))
    compute, transfers = times(timeline)
    hop = round(0.1 + 128 / 1e6, 9)
    assert same(compute, {("a", "FORWARD"): (0, 1), ("b", "FORWARD"): (1 + hop, 2 + hop),
                          ("b", "BACKWARD"): (2 + hop, 5 + hop),
                          ("a", "BACKWARD"): (5 + 2 * hop, 7 + 2 * hop)})
    assert same(transfers, [(("d0->d1",), 1.0, 1 + hop), (("d1->d0",), 5 + hop, 5 + 2 * hop)])
    # d1 keeps a's block it received (b re-runs on it), not b's output
    assert timeline.devices[1].memory.activations == 128
    assert timeline.devices[0].memory.activations == 2 * 128


def test_inference_has_nothing_to_recompute():
    graph = chain()
    sim = Simulator(graph, line_cluster(1), FixedCost(), training=False)
    kept = place(graph, dict(x=0, fc=0, act=0))
    assert sim.simulate(recomputing(kept, "fc")).makespan == sim.simulate(kept).makespan == 2.0


def test_the_strategy_file_says_which_ops_are_recomputed(tmp_path):
    graph, cluster = chain(), line_cluster(1)
    chosen = recomputing(place(graph, dict(x=0, fc=0, act=0)), "act")
    path = tmp_path / "s.json"
    save_strategy(path, chosen, graph, cluster)
    ops = json.loads(path.read_text())["ops"]
    assert ops["act"]["recompute"] is True and "recompute" not in ops["fc"]
    assert dict(load_strategy(path, graph, cluster)) == dict(chosen)


@pytest.mark.parametrize("op, value, says", [
    ("act", "yes", r"ops\.act\.recompute: .*true or false"),
    ("x", True, r"op 'x': a graph input has no backward pass to recompute in"),
])
def test_a_bad_recompute_entry_is_refused_naming_it(tmp_path, op, value, says):
    graph, cluster = chain(), line_cluster(1)
    path = tmp_path / "s.json"
    save_strategy(path, place(graph, dict(x=0, fc=0, act=0)), graph, cluster)
    data = json.loads(path.read_text())
    data["ops"][op]["recompute"] = value
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyError, match=says):
        load_strategy(path, graph, cluster)
