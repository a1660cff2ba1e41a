"""The reference a strategy's run must equal: the whole, unpartitioned graph trained in
one process, every op as one block through the same kernels, with the same starting
parameters, data and update (``values``, ``engine.Optimizer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from flextui.graph import Op, OpGraph, full_region
from flextui.graph.kernels import kernel_for
from flextui.runtime.engine import SGD, Optimizer, kernel_seed, within
from flextui.runtime.plan import index_bounds
from flextui.runtime.values import StartingParameters, input_block


@dataclass
class ReferenceRun:
    """The loss of every step and the parameters after the last."""

    losses: list[float]
    params: dict[str, torch.Tensor]


def train_whole(graph: OpGraph, steps: int, *, seed: int = 0,
                dtype: torch.dtype = torch.float64,
                optimizer: Optimizer = SGD) -> ReferenceRun:
    start = StartingParameters(graph, seed)
    params = {name: start.block(name, full_region(p.shape), dtype).requires_grad_()
              for name, p in graph.parameters.items()}
    velocity = {name: torch.zeros_like(p) for name, p in params.items()}
    bounds = index_bounds(graph)
    losses = []
    for step in range(steps):
        def data(op: Op, step: int = step) -> torch.Tensor:
            region = full_region(op.space_shape)
            return input_block(op, op.output_regions(region)[0], seed, step, dtype,
                               bounds.get(op.index))

        loss = forward_whole(graph, params, data, kernel_seed(seed, step), dtype)
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for name, param in params.items():
                grad = param.grad if param.grad is not None else torch.zeros_like(param)
                velocity[name].mul_(optimizer.momentum).add_(grad)
                param.add_(velocity[name], alpha=-optimizer.lr)
                param.grad = None
    return ReferenceRun(losses, {name: p.detach() for name, p in params.items()})


def forward_whole(graph: OpGraph, params: dict[str, torch.Tensor],
                  data: Callable[[Op], torch.Tensor], seed: int,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """One forward pass of the whole graph, every op as one block through its kernel,
    from ``params`` (by name) and each input op's ``data``; returns the loss."""
    outputs: dict[int, list[torch.Tensor]] = {}
    loss = torch.zeros((), dtype=dtype)
    for op in graph.ops:
        region = full_region(op.space_shape)
        if op.type == "input":
            inputs = [data(op)]
        else:
            inputs = []
            for t, need in zip(op.inputs, op.input_regions(region)):
                assert t.producer is not None
                inputs.append(outputs[t.producer.index][t.index][
                    within(need, full_region(t.shape))])
        blocks = [params[p.name][within(op.param_region(i, region), full_region(p.shape))]
                  for i, p in enumerate(op.params)]
        outs, share = kernel_for(op.type).forward_loss(op, region, inputs, blocks, seed)
        outputs[op.index] = outs
        if share is not None:
            loss = loss + share
    return loss
