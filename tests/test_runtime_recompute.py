"""Recomputation in one rank's step: a recomputed op's forward runs without autograd and
again, with it, in its backward pass (the rest once); the step still equals the whole
graph's training (tests/test_runtime_plan.py, tests/test_runtime_ranks.py: every small
model with ops recomputed, alone and among op splits, on 1, 2 and 4 ranks)."""

from collections import Counter

import pytest
import torch

from flextui.errors import FlextuiError
from flextui.graph.kernels import base
from flextui.machine import load_named_cluster
from flextui.runtime import engine
from flextui.runtime.comm import Comm
from flextui.runtime.engine import RankProgram
from flextui.runtime.plan import compile_plan
from flextui.runtime.spec import LaunchSpec, Training
from runtime_models import on_one_rank, small, strategy


@pytest.mark.parametrize("name", ["recompute-random-2", "recompute-data-parallel"])
def test_a_recomputed_op_runs_its_forward_again_with_autograd_in_its_backward(
        monkeypatch, name):
    """Once each, also along a chain of recomputed ops (every op under data
    parallelism), whose tasks are made again from the chain's first kept input."""
    graph, cluster = small("mlp"), load_named_cluster("local-cpu-4")
    chosen = on_one_rank(strategy(name, graph, cluster))
    recomputed = {name for name, config in chosen.items() if config.recompute}
    assert recomputed
    calls: Counter = Counter()
    states, not_kept = [], []   # the step's state; its inputs not kept, at the first re-run
    real_init = engine._StepState.__init__

    def capture(self, *args):
        real_init(self, *args)
        states.append(self)
    monkeypatch.setattr(engine._StepState, "__init__", capture)
    for kernel in {type(k) for k in base.KERNELS.values()}:
        real = kernel.forward_loss

        def counted(self, op, region, inputs, params, seed, real=real):
            grad = torch.is_grad_enabled()
            if grad and op.name in recomputed and not not_kept:
                not_kept.append([(key, slot) for key, kept in states[-1].kept.items()
                                 for slot, leaf in enumerate(kept) if leaf is None])
            calls[(op.name, grad)] += 1
            return real(self, op, region, inputs, params, seed)
        monkeypatch.setattr(kernel, "forward_loss", counted)
    program = RankProgram(compile_plan(graph, chosen, 1), 0, Comm(0, [], torch.device("cpu")),
                          dtype=torch.float64)
    program.step(0)
    # every op recomputed: each task's input from the op before it is made again, not kept
    assert bool(not_kept[0]) == (name == "recompute-data-parallel")
    for op in graph.ops:
        tasks = chosen[op.name].num_tasks
        if op.name in recomputed:
            assert (calls[(op.name, False)], calls[(op.name, True)]) == (tasks, tasks), op.name
        elif op.type != "input":
            assert (calls[(op.name, False)], calls[(op.name, True)]) == (0, tasks), op.name


def test_the_launch_plan_carries_which_ops_are_recomputed():
    graph, cluster = small("lenet"), load_named_cluster("local-cpu-4")
    chosen = strategy("recompute-random-2", graph, cluster)
    spec = LaunchSpec(graph, chosen, 4, Training())
    again = LaunchSpec.decode(spec.encode(), "plan")
    assert dict(again.strategy) == dict(chosen)
    assert any(c.recompute for c in again.strategy.values())
    body = spec.to_dict()
    body["strategy"][1][1] = [*body["strategy"][1][1][:2], "yes"]
    with pytest.raises(FlextuiError, match="recompute"):
        LaunchSpec.from_dict(body, "plan")
