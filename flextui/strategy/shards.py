"""Sharded training state per parameter: ZeRO's stages over a parameter's replica group
(the devices that hold the same elements of it and sum their gradients).

Stage 1 shards the optimizer's state: each of the group's ``n`` devices updates and
keeps the state of one ``n``-th of the group's elements, after a reduce-scatter of the
gradient (each device gets the sum of its own part), and an all-gather gives every
device the updated elements. Stage 2 also keeps only that ``n``-th of the gradient.
Stage 3 (the parameter too, gathered before each use: FSDP's full shard) is named
for the file format but not built yet: a strategy asking for it is refused.

A reduce-scatter and an all-gather move the bytes of one all-reduce, so a sharded
group's sync costs what its all-reduce did; the update and the memory shrink.
"""

from __future__ import annotations

import math
from enum import IntEnum


class ShardStage(IntEnum):
    """How much of a parameter's training state each device of a replica group keeps."""

    NONE = 0         # all of it: the gradient all-reduced, every device updates all
    OPTIMIZER = 1    # its part of the optimizer's state (ZeRO-1)
    GRADIENTS = 2    # and of the gradient (ZeRO-2)
    PARAMETERS = 3   # and of the parameter (ZeRO-3, FSDP's full shard): not built yet

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {ShardStage.NONE: "none", ShardStage.OPTIMIZER: "optimizer state",
           ShardStage.GRADIENTS: "optimizer state and gradients",
           ShardStage.PARAMETERS: "optimizer state, gradients and parameters"}

#: the stages a strategy may use (stage 3 is refused until it is built)
BUILT_STAGES = (ShardStage.NONE, ShardStage.OPTIMIZER, ShardStage.GRADIENTS)


def shard_numel(numel: int, group: int) -> int:
    """The elements of a group's ``numel`` each of its ``group`` devices keeps when
    sharded: an equal part, the last padded (as the runtime pads the flat buffer it
    reduce-scatters)."""
    return math.ceil(numel / group)
