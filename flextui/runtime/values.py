"""The starting parameters of a run, block by block (its synthetic data:
``graph.kernels.synthetic``).

Every element depends only on the seed, the parameter's name and the element's position
in the whole tensor (``graph.kernels.positional``), so each rank builds just its own
blocks and they assemble to exactly what one process builds for the whole graph: a
single-process run is the reference for any strategy.

Parameters start uniform in [-b, b] with b = 1/sqrt(fan in) (fan in: the elements of a
row, or the length of a vector), as torch initialises linear and conv layers; a
normalisation's scale (a vector named "weight") starts at 1 +- 0.1 b.
"""

from __future__ import annotations

import math

import torch

from flextui.graph import OpGraph, Parameter, Region
from flextui.graph.kernels.positional import block_uniform, key_of


def parameter_block(param: Parameter, role: str, region: Region, seed: int,
                    dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """The starting values of ``region`` of ``param`` (of role ``role`` in its op)."""
    shape = param.shape
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    bound = 1.0 / math.sqrt(max(1, fan_in))
    centre = 1.0 if len(shape) == 1 and role == "weight" else 0.0
    if centre:
        bound *= 0.1
    u = block_uniform(region, shape, key_of("param", param.name, seed), torch.float64, device)
    return (centre + (2 * u - 1) * bound).to(dtype)


class StartingParameters:
    """Where a run's parameters start: the module's own weights for a graph imported
    from a PyTorch module (``module_weights``), else ``parameter_block``'s values."""

    def __init__(self, graph: OpGraph, seed: int) -> None:
        from flextui.runtime.module_weights import module_parameters

        self.graph, self.seed = graph, seed
        self.roles = {p.name: op.param_specs[i].role for op in graph.ops
                      for i, p in enumerate(op.params)}
        self.module = module_parameters(graph, seed)

    def block(self, name: str, region: Region, dtype: torch.dtype,
              device: torch.device | str = "cpu") -> torch.Tensor:
        """The starting values of ``region`` of parameter ``name``."""
        if self.module is not None:
            whole = self.module[name][tuple(slice(a, b) for a, b in region)]
            return whole.to(dtype=dtype, device=device, copy=True)
        return parameter_block(self.graph.parameters[name], self.roles[name], region,
                               self.seed, dtype, device)

