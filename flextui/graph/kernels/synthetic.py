"""The synthetic data of a run, block by block: what an input op's task makes when a
launch trains on data made from the seed (its default), element by element from the
element's position in the whole tensor (``positional``), so each rank makes just its
own blocks and they assemble to exactly what one process makes for the whole graph.
The runtime feeds it to its ranks and its one-process references; the profiler times
it, so a prediction made from profiles counts making the batch as a run does."""

from __future__ import annotations

import torch

from flextui.graph.kernels.positional import block_hash, block_uniform, key_of
from flextui.graph.op import Op
from flextui.graph.ops.basic import InputFill
from flextui.graph.region import Region, region_shape


def input_block(op: Op, region: Region, seed: int, step: int, dtype: torch.dtype,
                index_bound: int | None, device: torch.device | str = "cpu") -> torch.Tensor:
    """Block ``region`` of input op ``op``'s data for ``step``: ``dtype`` floats in
    [-1, 1], or (``index_bound`` given) integers of the op's dtype below it; positions
    (``InputFill.POSITIONS``) are each element's index along dim 1, zeros zeros. Float
    inputs are uniform in [-1, 1]; integer inputs (labels, ids) uniform below what their
    consumers accept (the runtime's ``Plan.index_bounds``)."""
    shape = op.outputs[0].shape
    if op.attrs.get("fill") == InputFill.ZEROS:
        return torch.zeros(region_shape(region), dtype=getattr(torch, op.outputs[0].dtype),
                           device=device)
    if op.attrs.get("fill") == InputFill.POSITIONS:
        (first, stop), rows = region[1], region[0][1] - region[0][0]
        return torch.arange(first, stop, device=device).expand(rows, -1).to(
            getattr(torch, op.outputs[0].dtype))
    key = key_of("input", op.name, seed, step)
    if index_bound is not None:
        values = block_hash(region, shape, key, device) % index_bound
        return values.to(getattr(torch, op.outputs[0].dtype))
    return (2 * block_uniform(region, shape, key, torch.float64, device) - 1).to(dtype)
