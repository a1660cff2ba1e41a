"""What an exported DeviceMesh plan is made of (``flextui export --format torch``): the
layouts an activation takes over the tensor-parallel dim, the torch parallel styles, a
layer's plan and the whole plan. ``export_plan.py`` makes one, ``export_torch.py``
writes it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from flextui.errors import StrategyError


class NotExpressible(StrategyError):
    """A strategy that a DeviceMesh plan cannot express; the message names the op."""


class Layout(StrEnum):
    """How the ranks of a tp group hold an activation (each a plain local tensor):
    whole (Replicate()), split along its last dim, features (Shard(-1)), or along
    dim 1, the sequence (Shard(1))."""

    WHOLE = "whole"
    FEATURES = "features"
    SEQUENCE = "sequence"

    @property
    def placement(self) -> str:
        """Its DTensor placement, as Python."""
        return {Layout.WHOLE: "Replicate()", Layout.FEATURES: "Shard(-1)",
                Layout.SEQUENCE: "Shard(1)"}[self]


class TensorParallelStyle(StrEnum):
    """The torch parallel styles an export uses, by their class names."""

    COLWISE = "ColwiseParallel"
    ROWWISE = "RowwiseParallel"
    SEQUENCE = "SequenceParallel"
    GATHER = "PrepareModuleInput"   # a whole layer gathering a split input


#: the layouts each style takes and gives when told nothing (torch's defaults)
STYLE_DEFAULTS = {TensorParallelStyle.COLWISE: (Layout.WHOLE, Layout.FEATURES),
                  TensorParallelStyle.ROWWISE: (Layout.FEATURES, Layout.WHOLE),
                  TensorParallelStyle.SEQUENCE: (Layout.SEQUENCE, Layout.SEQUENCE)}


@dataclass(frozen=True)
class LayerPlan:
    """One layer's split over tp: ``module`` its path in the user's module, its style,
    and the layouts of its input and output."""

    module: str
    style: TensorParallelStyle
    input: Layout
    output: Layout


@dataclass(frozen=True)
class MeshPlan:
    """What ``parallelize(module, device_mesh)`` does: the mesh's shape, the layers'
    styles in the module's order, and the ops without weights whose split in the
    strategy the plan does not keep (they run where their inputs are)."""

    strategy: str
    model: str
    data: int
    tensor: int
    layers: tuple[LayerPlan, ...]
    followers: tuple[str, ...]

    @property
    def devices(self) -> int:
        return self.data * self.tensor
