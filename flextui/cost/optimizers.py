"""The optimizers a run trains with, and the state each keeps per parameter element
(what the memory model counts; the runtime keeps exactly as many tensors of each
parameter shard's size)."""

from __future__ import annotations

from enum import StrEnum


class OptimizerKind(StrEnum):
    """Which update the ranks run (``--optimizer``)."""

    SGD = "sgd"
    ADAMW = "adamw"

    @property
    def states(self) -> int:
        """Tensors of a parameter's size kept between steps: SGD's momentum buffer,
        AdamW's moving averages of the gradient and of its square."""
        return 2 if self is OptimizerKind.ADAMW else 1
