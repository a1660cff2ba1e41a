"""What a checked run (``flextui launch --check``) must equal, trained in one process on
the same batches, from the same starting parameters, with the same update (torch's own
optimizer, schedule and clipping: ``reference.TorchUpdate``): for a graph imported from
the user's PyTorch module, the module itself, run by plain PyTorch (its own forward,
``loss.backward()``, ``torch.optim.SGD`` or ``AdamW``), so an import that changed the
model's meaning cannot pass; for a model flextui built, the whole graph
(``reference.train_whole``).

The module runs on flextui's terms in two things only (``module_run.flextui_terms``):
dropout draws flextui's masks, and batch norm normalises each sample block the
strategy gives it on its own, as the ranks do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from flextui.graph import OpGraph, full_region
from flextui.graph.importer.module_run import ModuleCall, flextui_terms, module_loss
from flextui.graph.kernels.synthetic import input_block
from flextui.runtime.check import Referee, referee_of
from flextui.runtime.engine import kernel_seed
from flextui.runtime.module_weights import seeded_module
from flextui.runtime.optimizer import SGD, Optimizer
from flextui.runtime.plan import index_bounds
from flextui.runtime.reference import ReferenceRun, TorchUpdate, sample_blocks, train_whole
from flextui.strategy import Strategy

if TYPE_CHECKING:
    from flextui.runtime.data import DatasetFeed


def train_referee(graph: OpGraph, steps: int, *, seed: int = 0,
                  dtype: torch.dtype = torch.float64, optimizer: Optimizer = SGD,
                  strategy: Strategy | None = None,
                  data: DatasetFeed | None = None) -> ReferenceRun:
    """The losses and final parameters (by the graph's parameter names) of the run a
    check compares with: the user's module for an imported graph (on ``data``, the
    user's dataset, when given), else the graph; for a strategy in bf16 the graph, in
    bf16 as the ranks compute (``referee_of``)."""
    if referee_of(graph, strategy) == Referee.MODULE:
        return train_module(graph, steps, seed=seed, dtype=dtype, optimizer=optimizer,
                            strategy=strategy, data=data)
    return train_whole(graph, steps, seed=seed, dtype=dtype, optimizer=optimizer,
                       strategy=strategy)


def train_module(graph: OpGraph, steps: int, *, seed: int = 0,
                 dtype: torch.dtype = torch.float64, optimizer: Optimizer = SGD,
                 strategy: Strategy | None = None,
                 data: DatasetFeed | None = None) -> ReferenceRun:
    """The user's module (built from ``graph.source`` under ``torch.manual_seed(seed)``,
    as every rank builds its starting weights) trained ``steps`` steps on the runtime's
    data for ``graph``'s inputs: whole batches of ``data`` (the user's dataset) when
    given, else the data made from the seed."""
    call = ModuleCall.of(graph)
    module, params = seeded_module(graph, seed)
    module.to(dtype)  # its parameters stay the objects ``params`` holds
    update = TorchUpdate(module.parameters(), optimizer)
    bounds = index_bounds(graph)
    inputs = [op for op in graph.ops if op.type == "input"]
    wholes = {op.name: op.output_regions(full_region(op.space_shape))[0] for op in inputs}
    losses = []
    for step in range(steps):
        batch = {op.name: data.block(op, wholes[op.name], step)
                 if data is not None and data.feeds(op) else
                 input_block(op, wholes[op.name], seed, step, dtype, bounds.get(op.index))
                 for op in inputs}
        with flextui_terms(graph, kernel_seed(seed, step),
                           None if strategy is None else
                           lambda op: sample_blocks(op, strategy)):
            output = module(*(batch[name] for name in call.inputs))
        loss = module_loss(call, output, None if call.labels is None else batch[call.labels])
        loss.backward()
        update.step()
        losses.append(float(loss.detach()))
    return ReferenceRun(losses, {name: p.detach() for name, p in params.items()})
