"""The referee of an imported model: the user's own module trained by a plain PyTorch
loop (its forward, ``loss.backward()``, ``torch.optim.SGD`` or the optimizer a test
makes, a LambdaLR and clip_grad_norm_ where asked) in float64 on the batches the runtime
makes, never flextui's graph."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from flextui.graph import OpGraph, full_region
from flextui.graph.kernels.synthetic import input_block
from flextui.graph.library import pytorch_model
from flextui.graph.ops.basic import InputFill
from flextui.runtime.plan import index_bounds


def step_data(graph: OpGraph, seed: int, step: int) -> dict[str, torch.Tensor]:
    """Every input op's data at ``step``, as the runtime makes it (float64)."""
    bounds = index_bounds(graph)
    return {op.name: input_block(op, op.output_regions(full_region(op.space_shape))[0], seed,
                                 step, torch.float64, bounds.get(op.index))
            for op in graph.ops if op.type == "input"}


def module_training(graph: OpGraph, seed: int, steps: int, lr: float = 0.01,
                    momentum: float = 0.9, source: str | None = None,
                    optimizer: Callable[[Iterable[torch.nn.Parameter]],
                                        torch.optim.Optimizer] | None = None,
                    schedule: Callable[[int], float] | None = None,
                    clip: float | None = None, norms: list[float] | None = None,
                    ) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The module ``graph`` was imported from (its source's ``model()`` under the run's
    seed, float64), trained by torch.optim.SGD (or ``optimizer`` of its parameters, its
    learning rate set by a LambdaLR of ``schedule``, the gradients clipped to ``clip``
    by clip_grad_norm_, whose norms go into ``norms``) on the graph's data, its inputs in
    the order of its forward's arguments (a module that returns its loss): its loss at
    every step and its parameters after. ``source`` names the module of a graph read
    from a file (which has none)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = pytorch_model(source or graph.source, graph.meta.get("options")).module().double()
    users = [op.name for op in graph.ops
             if op.type == "input" and op.attrs.get("fill", InputFill.DATA) == InputFill.DATA]
    update = optimizer(module.parameters()) if optimizer else \
        torch.optim.SGD(module.parameters(), lr=lr, momentum=momentum)
    scheduler = torch.optim.lr_scheduler.LambdaLR(update, schedule) if schedule else None
    losses = []
    for step in range(steps):
        data = step_data(graph, seed, step)
        loss = module(*(data[name] for name in users))
        update.zero_grad()
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
            (norms if norms is not None else []).append(float(norm))
        update.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(float(loss.detach()))
    return losses, {name: p.detach()
                    for name, p in module.named_parameters(remove_duplicate=False)}
