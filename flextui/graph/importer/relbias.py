"""T5's relative position bias, as its attention builds it op by op: a learned table
[buckets, heads] looked up by a constant matrix of bucket ids [queries, keys] (made
from the positions alone), moved to [1, heads, queries, keys] and given to
scaled_dot_product_attention as its mask, where a constant mask lets keys be seen
(``where(mask, bias, min)``). The pieces are one value (``PositionBias``) until the
attention takes it: the multihead_attention op then holds the table as a parameter and
the bucket of each distance key - query, which the importer checks are the model's."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import ParamRef, Unmappable


@dataclass(frozen=True, eq=False)
class PositionBias:
    """A table looked up by constant bucket ids, ``laid out`` as [1, heads, queries,
    keys] once moved, seen only where ``mask`` is True (None: everywhere)."""

    table: ParamRef
    ids: torch.Tensor
    laid_out: bool = False
    mask: torch.Tensor | None = None


def describe(value: Any) -> str | None:
    if isinstance(value, PositionBias):
        return "a relative position bias read other than as an attention's mask"
    return None


def lookup(table: ParamRef, ids: Constant) -> PositionBias:
    tensor = ids.tensor
    if tensor is None or tensor.dim() != 2 or tensor.is_floating_point():
        raise Unmappable("constant ids other than positions, zeros or a [queries, keys] "
                         "matrix of buckets")
    if len(table.shape) != 2:
        raise Unmappable("a bias table that is not [buckets, heads]")
    return PositionBias(table, tensor)


def permute(bias: PositionBias, dims: list[int]) -> PositionBias:
    if bias.laid_out or [d % 3 for d in dims] != [2, 0, 1]:
        raise Unmappable("a relative position bias moved other than to [heads, queries, "
                         "keys]")
    return replace(bias, laid_out=True)


def unsqueeze(bias: PositionBias, dim: int) -> PositionBias:
    if not bias.laid_out or dim != 0:
        raise Unmappable("a relative position bias given other than a leading batch dim")
    return bias


def where(condition: Any, bias: Any, other: Any) -> PositionBias:
    """``where(mask, bias, least)``: the bias where the constant mask sees."""
    mask = condition.tensor if isinstance(condition, Constant) else None
    if not isinstance(bias, PositionBias) or mask is None or mask.dtype != torch.bool \
            or bias.mask is not None or not isinstance(other, float) or other > -1e30:
        raise Unmappable("a where() other than a constant mask over a relative position "
                         "bias, hiding with the least float")
    return replace(bias, mask=mask)


def buckets(bias: PositionBias) -> list[int]:
    """The bucket of each distance key - query, from -(queries - 1) to keys - 1;
    Unmappable when the ids do not depend on the distance alone."""
    queries, keys = bias.ids.shape
    found = [int(bias.ids[max(0, -d), max(0, d)]) for d in range(-(queries - 1), keys)]
    distance = torch.arange(keys)[None, :] - torch.arange(queries)[:, None] + queries - 1
    if not torch.equal(torch.tensor(found)[distance], bias.ids):
        raise Unmappable("relative position buckets that depend on more than the distance")
    if min(found) < 0 or max(found) >= bias.table.shape[0]:
        raise Unmappable("relative position buckets outside the bias table")
    return found
