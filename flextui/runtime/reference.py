"""The reference a strategy's run must equal: the whole, unpartitioned graph trained in
one process, every op as one block through the same kernels, with the same starting
parameters and data (``values``) and the same update, made by torch's own optimizer,
scheduler and clipping (``TorchUpdate``, as ``optimizer.Optimizer`` says).

One exception: an op whose result depends on how its samples are grouped (batch norm's
batch statistics) is computed in the sample blocks the strategy gives it, as data
parallelism without synchronised batch norm does on any framework; without a strategy,
in one block."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from flextui.cost.optimizers import OptimizerKind
from flextui.graph import Op, OpGraph, Region, full_region
from flextui.graph.dims import DimKind
from flextui.graph.kernels.mixed import Mixed
from flextui.graph.kernels.synthetic import input_block
from flextui.graph.kernels.whole import run_whole
from flextui.runtime.engine import kernel_seed, mixed_of
from flextui.runtime.optimizer import SGD, Optimizer
from flextui.runtime.plan import index_bounds
from flextui.runtime.values import StartingParameters
from flextui.strategy import Strategy
from flextui.strategy.pipeline import micro_region

#: op types computed with statistics over their block's samples
SAMPLE_STATISTICS = frozenset({"batchnorm"})


@dataclass
class ReferenceRun:
    """The loss of every step and the parameters after the last."""

    losses: list[float]
    params: dict[str, torch.Tensor]


def train_whole(graph: OpGraph, steps: int, *, seed: int = 0,
                dtype: torch.dtype = torch.float64, optimizer: Optimizer = SGD,
                strategy: Strategy | None = None) -> ReferenceRun:
    """``steps`` steps of the whole graph, its parameters in ``dtype``; a strategy in bf16
    (``strategy.precision``) computes its ops in bfloat16, as the ranks do."""
    start = StartingParameters(graph, seed)
    params = {name: start.block(name, full_region(p.shape), dtype).requires_grad_()
              for name, p in graph.parameters.items()}
    update = TorchUpdate(params.values(), optimizer)
    bounds = index_bounds(graph)
    losses = []
    for step in range(steps):
        def data(op: Op, step: int = step) -> torch.Tensor:
            region = full_region(op.space_shape)
            return input_block(op, op.output_regions(region)[0], seed, step, dtype,
                               bounds.get(op.index))

        loss = forward_whole(graph, params, data, kernel_seed(seed, step), dtype, strategy,
                             mixed_of(strategy, dtype))
        loss.backward()
        losses.append(float(loss.detach()))
        update.step()
    return ReferenceRun(losses, {name: p.detach() for name, p in params.items()})


class TorchUpdate:
    """torch's own update of ``params`` as ``optimizer`` says: torch.optim.SGD or AdamW,
    its learning rate set by a LambdaLR of the schedule, the gradients clipped by
    torch.nn.utils.clip_grad_norm_ first. ``step`` after each backward pass."""

    def __init__(self, params: Iterable[torch.Tensor], optimizer: Optimizer) -> None:
        self.params = list(params)
        self.clip = optimizer.grad_clip
        self.torch: torch.optim.Optimizer
        if optimizer.kind == OptimizerKind.ADAMW:
            self.torch = torch.optim.AdamW(self.params, lr=optimizer.lr, betas=optimizer.betas,
                                           eps=optimizer.eps,
                                           weight_decay=optimizer.weight_decay)
        else:
            self.torch = torch.optim.SGD(self.params, lr=optimizer.lr,
                                         momentum=optimizer.momentum,
                                         weight_decay=optimizer.weight_decay)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.torch, optimizer.factor)

    def step(self) -> None:
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.torch.step()
        self.schedule.step()
        self.torch.zero_grad()


def forward_whole(graph: OpGraph, params: dict[str, torch.Tensor],
                  data: Callable[[Op], torch.Tensor], seed: int,
                  dtype: torch.dtype = torch.float64,
                  strategy: Strategy | None = None, mixed: Mixed | None = None) -> torch.Tensor:
    """One forward pass of the whole graph, every op as one block through its kernel
    (but ``sample_blocks``), from ``params`` (by name) and each input op's ``data``;
    returns the loss."""
    return run_whole(graph, params, data, seed, dtype,
                     None if strategy is None else lambda op: sample_blocks(op, strategy),
                     mixed=mixed)



def sample_blocks(op: Op, strategy: Strategy | None) -> list[Region]:
    """The regions the reference computes ``op`` in: the whole op, or for a batch
    statistics op (``SAMPLE_STATISTICS``) one per sample range of its config (and of
    each micro-batch: ``pipeline.micro_region``), in order (its sample dim is dim 0 of
    its output)."""
    whole = full_region(op.space_shape)
    if strategy is None or op.type not in SAMPLE_STATISTICS:
        return [whole]
    config = strategy[op.name]
    dim = next((i for i, d in enumerate(op.space) if d.kind == DimKind.SAMPLE), None)
    if dim is None:
        return [whole]
    m = strategy.pipeline.microbatches
    ranges = sorted({micro_region(op, config.task_region(op, k), m, j)[dim]
                     for k in range(len(config.devices)) for j in range(m)})
    return [(*whole[:dim], r, *whole[dim + 1:]) for r in ranges]
