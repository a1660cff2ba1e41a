"""One forward pass of a whole graph in one process: every op as one block through its
kernel (or as the blocks a caller asks for), from whole parameters and each input op's
data. The runtime's one-process reference and the importer's check against the user's
module both run a graph this way."""

from __future__ import annotations

from collections.abc import Callable

import torch

from flextui.graph.graph import OpGraph
from flextui.graph.kernels.mixed import Mixed, forward_loss
from flextui.graph.op import Op
from flextui.graph.region import Region, full_region, within


def run_whole(graph: OpGraph, params: dict[str, torch.Tensor],
              data: Callable[[Op], torch.Tensor], seed: int,
              dtype: torch.dtype = torch.float64,
              blocks: Callable[[Op], list[Region]] | None = None,
              outputs: dict[int, list[torch.Tensor]] | None = None,
              mixed: Mixed | None = None) -> torch.Tensor:
    """The loss of one forward pass from ``params`` (by name) and each input op's
    ``data``. ``blocks`` gives the regions an op is computed in, in sample order (the
    whole op when None: an op computed in sample blocks is concatenated along dim 0);
    ``outputs``, when given, receives every op's outputs by op index; ``mixed``: the
    ops compute under mixed precision (``kernels.mixed``)."""
    found: dict[int, list[torch.Tensor]] = {} if outputs is None else outputs
    loss = torch.zeros((), dtype=dtype)
    for op in graph.ops:
        parts = []
        for region in blocks(op) if blocks is not None else [full_region(op.space_shape)]:
            if op.type == "input":
                inputs = [data(op)]
            else:
                inputs = []
                for t, need in zip(op.inputs, op.input_regions(region)):
                    assert t.producer is not None
                    inputs.append(found[t.producer.index][t.index][
                        within(need, full_region(t.shape))])
            shards = [params[p.name][within(op.param_region(i, region), full_region(p.shape))]
                      for i, p in enumerate(op.params)]
            outs, share = forward_loss(op, region, inputs, shards, seed, mixed)
            parts.append(outs)
            if share is not None:
                loss = loss + share
        found[op.index] = parts[0] if len(parts) == 1 else \
            [torch.cat(pieces, dim=0) for pieces in zip(*parts)]
    return loss


#: the least magnitude a tensor's error is taken against (float64 parameters)
ABSOLUTE_FLOOR = 1e-9


def relative_error(found: torch.Tensor, expected: torch.Tensor, scale: float = 0.0) -> float:
    """The largest elementwise difference, relative to the tensor's largest magnitude (or
    to ``scale`` when larger, and to at least 1e-9): a sum's rounding is of the size of
    its terms, not of its result, so an element near zero is judged at the tensor's
    scale. Elementwise, a ResNet-50 trained 3 steps at a loss rising from 7 to 17
    differed by 3.7e-6 in the elements near zero of a weight, 4.6e-12 apart, of a tensor
    whose largest is 0.34 (1.3e-11 at its scale); an attention's key bias, whose
    gradient is zero but for rounding, stays within 1e-17 of its start in noise that
    differs between orders of summation."""
    if not expected.numel():
        return 0.0
    largest = max(float(expected.abs().max()), scale, ABSOLUTE_FLOOR)
    return float((found.to(expected.dtype) - expected).abs().max()) / largest
