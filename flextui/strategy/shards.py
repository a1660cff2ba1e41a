"""Sharded training state per parameter: ZeRO's stages over a parameter's replica group
(the devices that hold the same elements of it and sum their gradients).

Stage 1 shards the optimizer's state: each of the group's ``n`` devices updates and
keeps the state of one ``n``-th of the group's elements, after a reduce-scatter of the
gradient (each device gets the sum of its own part), and an all-gather gives every
device the updated elements. Stage 2 also keeps only that ``n``-th of the gradient.
Stage 3 also keeps only that ``n``-th of the parameter (FSDP's full shard): before
the op that uses it runs its forward tasks, and again before its backward tasks, the
group's devices all-gather the parameter, and free it after use; the gradient is
reduce-scattered, and each device updates its part, which is all it keeps. Stage 3 is
for a parameter one op uses (a shared one would be gathered for each of its ops by
devices that do not run them).

A reduce-scatter and an all-gather move the bytes of one all-reduce, so a stage 1 or 2
group's sync costs what its all-reduce did; the update and the memory shrink. At stage 3
the sync is the reduce-scatter alone, and each pass's all-gather is a task of its own.
"""

from __future__ import annotations

import math
from enum import IntEnum


class ShardStage(IntEnum):
    """How much of a parameter's training state each device of a replica group keeps."""

    NONE = 0         # all of it: the gradient all-reduced, every device updates all
    OPTIMIZER = 1    # its part of the optimizer's state (ZeRO-1)
    GRADIENTS = 2    # and of the gradient (ZeRO-2)
    PARAMETERS = 3   # and of the parameter (ZeRO-3, FSDP's full shard)

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {ShardStage.NONE: "none", ShardStage.OPTIMIZER: "optimizer state",
           ShardStage.GRADIENTS: "optimizer state and gradients",
           ShardStage.PARAMETERS: "optimizer state, gradients and parameters"}

#: the stages a parameter shared by several ops may use (stage 3 gathers a parameter
#: before its one op)
SHARED_STAGES = (ShardStage.NONE, ShardStage.OPTIMIZER, ShardStage.GRADIENTS)


def stages_for(shared: bool) -> tuple[ShardStage, ...]:
    """The stages a parameter may use: all, or if several ops share it, up to 2."""
    return SHARED_STAGES if shared else tuple(ShardStage)


def stage_refusal(name: str, stage: ShardStage, shared: bool) -> str | None:
    """Why parameter ``name`` may not use ``stage`` (None: it may)."""
    if stage in stages_for(shared):
        return None
    return (f"parameter {name!r} is used by several ops, so its shard stage may be at most "
            f"2 (stage 3 gathers a parameter before its one op; asked: {int(stage)})")


def shard_numel(numel: int, group: int) -> int:
    """The elements of a group's ``numel`` each of its ``group`` devices keeps when
    sharded: an equal part, the last padded (as the runtime pads the flat buffer it
    reduce-scatters)."""
    return math.ceil(numel / group)
