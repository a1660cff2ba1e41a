"""The referee of an imported model: the user's own module trained by a plain PyTorch
loop (its forward, ``loss.backward()``, ``torch.optim.SGD``) in float64 on the batches
the runtime makes, never flextui's graph."""

from __future__ import annotations

import torch

from flextui.graph import OpGraph, full_region
from flextui.graph.library import pytorch_model
from flextui.graph.ops.basic import InputFill
from flextui.runtime.plan import index_bounds
from flextui.runtime.values import input_block


def step_data(graph: OpGraph, seed: int, step: int) -> dict[str, torch.Tensor]:
    """Every input op's data at ``step``, as the runtime makes it (float64)."""
    bounds = index_bounds(graph)
    return {op.name: input_block(op, op.output_regions(full_region(op.space_shape))[0], seed,
                                 step, torch.float64, bounds.get(op.index))
            for op in graph.ops if op.type == "input"}


def module_training(graph: OpGraph, seed: int, steps: int, lr: float = 0.01,
                    momentum: float = 0.9, source: str | None = None,
                    ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The module ``graph`` was imported from (its source's ``model()`` under the run's
    seed, float64), trained by torch.optim.SGD on the graph's data, its inputs in the
    order of its forward's arguments (a module that returns its loss): its loss at every
    step and its parameters after. ``source`` names the module of a graph read from a
    file (which has none)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = pytorch_model(source or graph.source, graph.meta.get("options")).module().double()
    users = [op.name for op in graph.ops
             if op.type == "input" and op.attrs.get("fill", InputFill.DATA) == InputFill.DATA]
    optimizer = torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)
    losses = []
    for step in range(steps):
        data = step_data(graph, seed, step)
        loss = module(*(data[name] for name in users))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, {name: p.detach()
                    for name, p in module.named_parameters(remove_duplicate=False)}
