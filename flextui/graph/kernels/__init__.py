"""Block kernels: how one task computes its blocks of an op with torch.

The profiler times these kernels and the runtime executes them, so profiles describe
what the runtime runs. Importing this package imports torch and registers a kernel for
every op type; ``flextui.graph`` itself never imports it, so the IR stays torch-free.

    inputs, params = block_tensors(op, region)            # random, for profiling
    outputs = forward_block(op, region, inputs, params)
    grad_inputs, grad_params = backward_block(op, region, inputs, params, grad_outputs)

``region`` is a block of ``op.space`` (one ``(start, stop)`` per dim, e.g. a task's
``ParallelConfig.task_region``). The operands are the blocks at
``operand_regions(op, region)`` of the op's inputs (halos included; an input op is
fed its own output block), the parameters the shards at ``op.param_region(i,
region)``, and the outputs the blocks at ``op.output_regions(region)``. Kernels are
pure torch and differentiable, on whatever device and dtype the tensors are.

Block semantics follow the op types' docstrings; where an op is not purely local:
batchnorm normalises with each sample block's statistics, dropout's mask depends on
``seed`` and each element's global position (so blocks agree with the whole op), and
softmax_ce's loss is the mean over the whole op's labels, shared out among blocks.
"""

from __future__ import annotations

from typing import cast

import torch

from flextui.errors import GraphError
from flextui.graph.kernels import (  # noqa: F401
    attention,
    basic,
    conv,
    dense,
    layout,
    opaque,
    recurrent,
)
from flextui.graph.kernels.base import KERNELS, Kernel, Tensors, kernel_for
from flextui.graph.op import Op
from flextui.graph.region import Region, region_shape
from flextui.graph.tensor import FLOAT_DTYPES, DType

__all__ = ["KERNELS", "Kernel", "backward_block", "block_tensors", "forward_block", "kernel_for",
           "loss_block", "operand_regions", "torch_dtype"]



def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a graph's dtype name (:class:`~flextui.graph.tensor.DType`)."""
    return getattr(torch, DType(dtype).value)


def operand_regions(op: Op, region: Region) -> list[Region]:
    """The region of each tensor ``forward_block`` takes as input: ``op.input_regions``,
    except for an input op, whose one operand is its own output block (the data)."""
    return kernel_for(op.type).operand_regions(op, region)


def forward_block(op: Op, region: Region, inputs: Tensors, params: Tensors, *,
                  seed: int = 0) -> list[torch.Tensor]:
    """The output blocks of ``op`` for the block ``region`` of its space."""
    return _checked(op, region, inputs, params).forward(op, region, inputs, params, seed)


def loss_block(op: Op, region: Region, inputs: Tensors, params: Tensors, *,
               seed: int = 0) -> torch.Tensor | None:
    """The block's share of the training loss (a scalar; the shares of all blocks add up
    to the op's loss), or None when the op is not a loss."""
    kernel = _checked(op, region, inputs, params)
    return kernel.forward_loss(op, region, inputs, params, seed)[1]


def backward_block(op: Op, region: Region, inputs: Tensors, params: Tensors,
                   grad_outputs: list[torch.Tensor | None], *, seed: int = 0,
                   ) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
    """Gradients of the block's inputs and parameter shards, by autograd through
    ``forward_block``, of the objective sum(outputs * grad_outputs) plus the block's
    loss (``loss_block``). A None grad output counts as zero. Integer inputs (ids,
    labels) get None; inputs and parameters the block does not use get zeros."""
    kernel = _checked(op, region, inputs, params)
    if len(grad_outputs) != len(op.outputs):
        raise GraphError(f"op {op.name!r} ({op.type}): {len(op.outputs)} output gradients "
                         f"needed, {len(grad_outputs)} given")
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in (*inputs, *params)]
        outputs, loss = kernel.forward_loss(op, region, leaves[:len(inputs)],
                                            leaves[len(inputs):], seed)
        roots, seeds = [], []
        for i, (out, grad) in enumerate(zip(outputs, grad_outputs)):
            if grad is None:
                continue
            if grad.shape != out.shape:
                raise GraphError(f"op {op.name!r} ({op.type}): gradient of output {i} has "
                                 f"shape {list(grad.shape)}, the block's output {list(out.shape)}")
            if out.requires_grad:
                roots.append(out)
                seeds.append(grad)
        if loss is not None:
            roots.append(loss)
            seeds.append(torch.ones_like(loss))
        wanted = [t for t in leaves if t.requires_grad]
        found = (torch.autograd.grad(roots, wanted, seeds, allow_unused=True)
                 if roots and wanted else [None] * len(wanted))
    found_iter = iter(found)
    grads: list[torch.Tensor | None] = []
    for t in leaves:
        grad = next(found_iter) if t.requires_grad else None
        grads.append(torch.zeros_like(t) if grad is None and t.requires_grad else grad)
    # parameters are floating point, so each has a gradient (zeros if unused)
    return grads[:len(inputs)], cast(list[torch.Tensor], grads[len(inputs):])


def block_tensors(op: Op, region: Region, *, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu", generator: torch.Generator | None = None,
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Random operands and parameter shards for the block ``region``, so a task can be
    timed without a model's data. Float tensors get ``dtype`` (standard normal values);
    integer operands keep their declared dtype with values the op accepts (labels below
    the class count, ids below the table size). With a ``generator``, values are drawn
    on its device and moved to ``device``."""
    kernel = kernel_for(op.type)
    _check_region(op, region)

    def draw(shape: tuple[int, ...], int_dtype: torch.dtype | None, bound: int) -> torch.Tensor:
        where = generator.device if generator is not None else device
        if int_dtype is None:
            t = torch.randn(shape, dtype=dtype, device=where, generator=generator)
        else:
            t = torch.randint(0, bound, shape, dtype=int_dtype, device=where, generator=generator)
        return t.to(device)

    inputs = [draw(region_shape(r), None if t.dtype in FLOAT_DTYPES else torch_dtype(t.dtype),
                   kernel.index_bound(op, i))
              for i, (r, t) in enumerate(zip(kernel.operand_regions(op, region),
                                             kernel.operands(op)))]
    params = [draw(region_shape(op.param_region(i, region)), None, 0)
              for i in range(len(op.params))]
    return inputs, params


def _checked(op: Op, region: Region, inputs: Tensors, params: Tensors) -> Kernel:
    """The op's kernel, once the region and every block's shape and kind are right."""
    kernel = kernel_for(op.type)
    _check_region(op, region)
    where = f"op {op.name!r} ({op.type}), block {list(region)}"
    operands = kernel.operands(op)
    _check_count(where, "input", len(operands), len(inputs))
    for i, (r, tensor, block) in enumerate(zip(kernel.operand_regions(op, region), operands,
                                               inputs)):
        _check_shape(where, f"input {i}", region_shape(r), block)
        integer = tensor.dtype.startswith("int")
        if integer == block.is_floating_point():
            raise GraphError(f"{where}: input {i} must be {'an integer' if integer else 'a float'}"
                             f" tensor ({tensor.dtype}), got {block.dtype}")
    _check_count(where, "parameter", len(op.params), len(params))
    for i, shard in enumerate(params):
        _check_shape(where, f"parameter {i} ({op.param_specs[i].role})",
                     region_shape(op.param_region(i, region)), shard)
    return kernel


def _check_region(op: Op, region: Region) -> None:
    """A block must lie in the space and, along each dim, on the dim's split grid."""
    where = f"op {op.name!r} ({op.type})"
    if len(region) != len(op.space):
        raise GraphError(f"{where}: block {list(region)} has {len(region)} dims, its space "
                         f"has {len(op.space)} ({', '.join(d.name for d in op.space)})")
    for (start, stop), dim in zip(region, op.space):
        step = dim.size // dim.splits
        if not 0 <= start < stop <= dim.size or start % step or stop % step:
            raise GraphError(f"{where}: block range [{start}, {stop}) of dim {dim.name!r} must "
                             f"lie in [0, {dim.size}) on multiples of {step}")


def _check_count(where: str, what: str, expected: int, got: int) -> None:
    if expected != got:
        raise GraphError(f"{where}: {expected} {what} blocks needed, {got} given")


def _check_shape(where: str, what: str, expected: tuple[int, ...], block: torch.Tensor) -> None:
    if tuple(block.shape) != expected:
        raise GraphError(f"{where}: {what} block has shape {list(block.shape)}, expected "
                         f"{list(expected)}")
