"""bf16 mixed precision in the simulator and the strategy file: a strategy in bf16 is
timed on the graph as it computes in bfloat16 (its ops at their bf16 cost, activations
kept and sent at 2 bytes an element) while parameters, gradients and the optimizer's
state stay float32, hand-computed; delta simulation of a bf16 strategy equals a full
one; the file's ``precision`` key and the launch plan carry it; a checked bf16 run is
judged within its stated tolerance (with AdamW, on the loss)."""

import json
from pathlib import Path

import pytest

from flextui.cost.model import OpCost
from flextui.errors import FlextuiError, StrategyError
from flextui.graph import GraphBuilder
from flextui.graph.precision import in_dtype
from flextui.sim import DeltaSimulator, Simulator
from flextui.strategy import builtin_strategy, load_strategy, random_config, save_strategy
from flextui.strategy.precision import Precision, computed_graph
from helpers import line_cluster
from test_sim_delta import signature
from test_sim_full import FixedCost, place
from test_sim_shards import chain, kept


class DtypeCost(FixedCost):
    """FixedCost, but a task of an op computing in bfloat16 takes half as long."""

    def op_cost(self, op, block_shape, device):
        if op.type == "input":
            return OpCost(0.0, 0.0)
        return OpCost(1.0, 2.0) if op.outputs[0].dtype == "float32" else OpCost(0.5, 1.0)


def timings(timeline):
    return [(t.kind.name, t.op, round(t.start, 9), round(t.end, 9), t.nbytes)
            for t in timeline.tasks]


def test_a_bf16_strategy_computes_and_moves_activations_in_bf16_and_keeps_fp32_state():
    graph, cluster = chain(), line_cluster(2)
    sim = Simulator(graph, cluster, DtypeCost())
    split = place(graph, dict(x=0, fc=1, act=1))
    fp32, bf16 = (sim.simulate(split.with_precision(p)) for p in Precision)
    # x (4 x 8) moves from d0 to d1: 0.1 s latency + 128 bytes at 1 MB/s, in bf16 64 bytes;
    # each compute task half as long; the updates (0.5 s each) of the float32 weight
    # (288 bytes) and bias (36) as they were
    assert timings(fp32) == [
        ("FORWARD", "x", 0.0, 0.0, 128), ("TRANSFER", "fc", 0.0, 0.100128, 128),
        ("FORWARD", "fc", 0.100128, 1.100128, 144), ("FORWARD", "act", 1.100128, 2.100128, 144),
        ("BACKWARD", "act", 2.100128, 4.100128, 0), ("BACKWARD", "fc", 4.100128, 6.100128, 0),
        ("UPDATE", "", 6.100128, 6.600128, 288), ("UPDATE", "", 6.600128, 7.100128, 36)]
    assert timings(bf16) == [
        ("FORWARD", "x", 0.0, 0.0, 64), ("TRANSFER", "fc", 0.0, 0.100064, 64),
        ("FORWARD", "fc", 0.100064, 0.600064, 72), ("FORWARD", "act", 0.600064, 1.100064, 72),
        ("BACKWARD", "act", 1.100064, 2.100064, 0), ("BACKWARD", "fc", 2.100064, 3.100064, 0),
        ("UPDATE", "", 3.100064, 3.600064, 288), ("UPDATE", "", 3.600064, 4.100064, 36)]
    # d1 keeps fc's and act's outputs and the x it received: half the bytes in bf16; the
    # parameters, their gradients and momentum in float32 either way
    assert [d.memory.activations for d in fp32.devices] == [128, 144 + 144 + 128]
    assert [d.memory.activations for d in bf16.devices] == [64, 72 + 72 + 64]
    assert kept(fp32) == kept(bf16) == [(0, 0, 0), (324, 324, 324)]


def test_the_bf16_view_is_the_graph_with_its_float_tensors_in_bf16():
    graph = chain()
    view = in_dtype(graph, "bfloat16")
    assert [op.name for op in view.ops] == [op.name for op in graph.ops]
    assert [t.dtype for op in view.ops for t in op.outputs] == ["bfloat16"] * 3
    assert {p.dtype for p in view.parameters.values()} == {"bfloat16"}
    assert view.ops[1].inputs[0] is view.ops[0].outputs[0]
    assert in_dtype(graph, "float32") is graph
    # one view per graph and dtype, kept with the graph: cost models memoise by op identity
    assert in_dtype(graph, "bfloat16") is view
    assert graph.ops[1].outputs[0].dtype == "float32"   # the graph itself unchanged
    # fp32 is the graph's own dtype throughout, whatever it is
    g = GraphBuilder("half", "float16")
    g.linear(g.input((4, 8), name="x"), 9, name="fc")
    wide = g.build()
    assert computed_graph(wide, Precision.FP32) is wide
    assert computed_graph(wide, Precision.BF16).ops[1].outputs[0].dtype == "bfloat16"


def test_delta_simulation_of_a_bf16_strategy_equals_a_full_one():
    import random
    graph, cluster = chain(), line_cluster(2)
    full = Simulator(graph, cluster, DtypeCost())
    delta = DeltaSimulator(graph, cluster, DtypeCost())
    current = builtin_strategy("data-parallel", graph, cluster).with_precision(Precision.BF16)
    delta.reset(current)
    rng = random.Random(3)
    for _ in range(20):
        op = rng.choice(graph.ops)
        config = random_config(op, 2, rng)
        cost = delta.propose(op.name, config)
        expected = full.simulate(current.replace(op.name, config))
        assert cost == expected.cost and signature(delta.timeline()) == signature(expected)
        if rng.random() < 0.5:
            delta.accept()
            current = current.replace(op.name, config)
        else:
            delta.reject()
    assert delta.strategy == current and delta.strategy.precision == Precision.BF16


def test_the_strategy_file_and_the_launch_plan_carry_the_precision(tmp_path):
    from flextui.runtime.spec import LaunchSpec, Training
    graph, cluster = chain(), line_cluster(2)
    bf16 = builtin_strategy("data-parallel", graph, cluster).with_precision(Precision.BF16)
    path = tmp_path / "s.json"
    save_strategy(path, bf16, graph, cluster)
    assert json.loads(path.read_text())["precision"] == "bf16"
    assert load_strategy(path, graph, cluster) == bf16
    assert bf16 != bf16.with_precision(Precision.FP32)
    again = LaunchSpec.decode(LaunchSpec(graph, bf16, 2, Training()).encode(), "plan")
    assert again.strategy == bf16
    plain = tmp_path / "plain.json"
    save_strategy(plain, bf16.with_precision(Precision.FP32), graph, cluster)
    assert "precision" not in json.loads(plain.read_text())
    data = json.loads(path.read_text())
    data["precision"] = "fp16"
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyError, match=r"precision: expected one of fp32, bf16, found "
                                            r"'fp16'"):
        load_strategy(path, graph, cluster)
    body = LaunchSpec(graph, bf16, 2, Training()).to_dict()
    body["strategy"][3] = "fp8"
    with pytest.raises(FlextuiError, match=r"plan: precision: .*'fp8'"):
        LaunchSpec.from_dict(body, "plan")


def test_a_bf16_check_is_judged_within_its_stated_tolerance_and_adamw_on_the_loss():
    from flextui.cost.optimizers import OptimizerKind
    from flextui.graph.library import load_model
    from flextui.runtime.check import (
        BF16_TOLERANCE,
        TOLERANCE,
        Referee,
        check_result,
        check_rule,
        referee_of,
    )
    from flextui.runtime.launch import Outcome, RunStatus
    from flextui.runtime.metrics import Check
    graph, cluster = chain(), line_cluster(2)
    fp32 = builtin_strategy("data-parallel", graph, cluster)
    bf16 = fp32.with_precision(Precision.BF16)
    assert check_rule(fp32, OptimizerKind.ADAMW).tolerance == TOLERANCE
    sgd, adamw = (check_rule(bf16, o) for o in OptimizerKind)
    assert (sgd.tolerance, sgd.params) == (BF16_TOLERANCE, True)
    assert (adamw.tolerance, adamw.params) == (BF16_TOLERANCE, False)
    done = Outcome(RunStatus.FINISHED, 0, None, "finished", 1.0)
    ranks = [Check(0, 1e-4, 2e-2, (1.0,), (1.0,)), Check(1, 5e-4, 1e-5, (1.0,), (1.0,))]
    judged = check_result(done, ranks, Referee.GRAPH, adamw)
    assert judged.equal and judged.worst == 5e-4 and judged.to_dict()["judged"] == "loss"
    strict = check_result(done, ranks, Referee.GRAPH, sgd)
    assert not strict.equal and strict.message.startswith("rank 0 is 2.0e-02 away")
    assert "tolerance 1e-03 on the loss and parameters" in strict.message
    # an imported model in bf16 is compared with its graph, in fp32 with its module
    imported = load_model(str(Path(__file__).with_name("torch_models") / "perceptron.py"))
    dp = builtin_strategy("data-parallel", imported, cluster)
    assert referee_of(imported, dp) == Referee.MODULE
    assert referee_of(imported, dp.with_precision(Precision.BF16)) == Referee.GRAPH
