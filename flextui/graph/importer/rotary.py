"""Rotary position embeddings as Llama's ``apply_rotary_pos_emb`` writes them, op by
op: ``q * cos + rotate_half(q) * sin``, where ``rotate_half`` cuts the heads' last dim
in halves and joins them back as ``(-second, first)``, and cos and sin are constants
(``constants.Constant``) the model's rotary embedding made from its ``inv_freq``
buffer. The pieces are values of their own (``Half``, ``Turned``, ``Times``) until the
sum joins them into one rotary op, whose tables the importer checks are exactly the
model's; anything else that reads a piece is reported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, Unmappable
from flextui.graph.importer.views import Heads


@dataclass(frozen=True)
class Half:
    """One half of the last dim of heads [B, h, S, d] (``second``), maybe negated."""

    heads: Heads
    second: bool
    negated: bool = False


@dataclass(frozen=True)
class Turned:
    """``rotate_half(heads)``: (-second half, first half)."""

    heads: Heads


@dataclass(frozen=True)
class Times:
    """Heads (or their turned form) times a constant table."""

    heads: Heads
    turned: bool
    table: Constant


PIECES = (Half, Turned, Times)


def describe(value: Any) -> str | None:
    if isinstance(value, PIECES):
        return "a piece of a rotary position embedding read other than as Llama's is"
    return None


def half(heads: Heads, dim: int, start: int, stop: int) -> Half:
    width = heads.tensor.shape[2] // heads.heads
    if dim % 4 != 3 or width % 2 or (start, min(stop, width)) not in ((0, width // 2),
                                                                     (width // 2, width)):
        raise Unmappable("a slice of attention heads other than one half of each head")
    return Half(heads, second=start > 0)


def negate(value: Half) -> Half:
    return Half(value.heads, value.second, not value.negated)


def turn(parts: list[Any]) -> Turned:
    if len(parts) == 2 and all(isinstance(p, Half) for p in parts):
        first, second = parts
        if first.heads == second.heads and (first.second, first.negated) == (True, True) \
                and (second.second, second.negated) == (False, False):
            return Turned(first.heads)
    raise Unmappable("joining halves of heads other than as (-second, first)")


def times(value: Any, table: Constant) -> Times:
    if isinstance(value, Heads) and value.transposed:
        return Times(value, False, table)
    if isinstance(value, Turned):
        return Times(value.heads, True, table)
    raise Unmappable("a constant multiplying something other than heads")


def join(ctx: Context, a: Any, b: Any) -> Heads:
    """``heads * cos + rotate_half(heads) * sin``: one rotary op."""
    if not (isinstance(a, Times) and isinstance(b, Times) and a.heads == b.heads
            and not a.turned and b.turned):
        raise Unmappable("a sum of heads times constants other than q * cos + "
                         "rotate_half(q) * sin")
    heads = a.heads
    seq, width = heads.tensor.shape[1], heads.tensor.shape[2] // heads.heads
    cos, sin = (_table(t, seq, width) for t in (a.table, b.table))
    inv_freq = _inv_freq(a.table, width)
    scaling = float(cos[0, 0])
    expected_cos, expected_sin = tables(inv_freq, scaling, seq, cos.dtype)
    if not (torch.equal(cos, expected_cos) and torch.equal(sin, expected_sin)):
        raise Unmappable("rotary tables other than cos and sin of position * inv_freq")
    attrs = {"heads": heads.heads, "inv_freq": [float(f) for f in inv_freq]}
    if scaling != 1.0:
        attrs["scaling"] = scaling
    out = ctx.builder.add("rotary", [heads.tensor], attrs, ctx.name).outputs[0]
    return Heads(out, heads.heads, transposed=True)


def tables(inv_freq: torch.Tensor, scaling: float, seq: int,
           dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [S, d] as the rotary kernel makes them."""
    angles = torch.arange(seq).to(dtype)[:, None] * inv_freq.to(dtype)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * scaling, angles.sin() * scaling


def _table(table: Constant, seq: int, width: int) -> torch.Tensor:
    tensor = table.tensor
    if tensor is None or not tensor.is_floating_point() or tensor.shape[-2:] != (seq, width):
        raise Unmappable("rotary tables that are not [positions, head dim]")
    rows = tensor.reshape(-1, seq, width)
    if not bool((rows == rows[:1]).all()):
        raise Unmappable("rotary tables that differ between samples")
    return rows[0]


def _inv_freq(table: Constant, width: int) -> torch.Tensor:
    """The frequencies the tables were made from: the one buffer of a frequency per
    pair of a head's dims that they come from (the rotary embedding's ``inv_freq``)."""
    found = [v for v in table.sources if v.dim() == 1 and v.numel() * 2 == width]
    if len(found) != 1:
        raise Unmappable("rotary tables not made from one inv_freq buffer")
    return found[0].float()
