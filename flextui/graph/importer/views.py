"""Values a model makes on its way to an op that flextui holds as one tensor: an
activation split into attention heads (``Heads``) and an activation whose batch dim
is merged into the next for a token-level loss (``FlatBatch``). The handlers here
make them and take them apart; anything else that reads one is reported
(``describe``), as is a constant (``constants.Constant``) read where no op takes one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flextui.graph.importer import constants
from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, Unmappable, owner
from flextui.graph.ops.basic import InputFill
from flextui.graph.tensor import Tensor


@dataclass(frozen=True)
class Heads:
    """An activation [B, S, D] seen with D split into ``heads`` heads: [B, S, h, d], or
    (``transposed``) [B, h, S, d], the layout scaled_dot_product_attention reads."""

    tensor: Tensor
    heads: int
    transposed: bool

    def flipped(self) -> Heads:
        return Heads(self.tensor, self.heads, not self.transposed)


@dataclass(frozen=True)
class FlatBatch:
    """An activation [B, T, ...] (or shifted labels) reshaped to [B*T, ...], read by
    cross_entropy or a linear layer (GPT-2's Conv1D), or reshaped back."""

    tensor: Any


@dataclass(frozen=True)
class Padded:
    """Integer labels [B, T] padded with ``width`` elements of ``value`` at the end."""

    tensor: Tensor
    width: int
    value: int


@dataclass(frozen=True)
class Shifted:
    """Labels [B, T] moved ``by`` places left, the last ``by`` places ``ignore`` (a
    causal LM's targets: each position predicts the next token)."""

    tensor: Tensor
    by: int
    ignore: int


def describe(value: Any) -> str | None:
    """Why ``value`` cannot be an op's input, when it is one of these views."""
    if isinstance(value, Heads):
        return ("an activation split into attention heads, read by something other than "
                "scaled_dot_product_attention or the reshape that merges the heads back")
    if isinstance(value, Constant):
        return ("a constant (made from the module's buffers and literals, not its inputs) "
                "read other than as an attention mask, positions or rotary tables")
    if isinstance(value, FlatBatch):
        return ("an activation whose batch dim is merged into the next, read by something "
                "other than cross_entropy")
    if isinstance(value, (Padded, Shifted)):
        return "labels padded or shifted, read other than by cross_entropy"
    return None


def view(ctx: Context, x: Any, shape: Any) -> Any:
    """A reshape that splits heads off, merges them back or flattens the batch for a
    loss; None when it is none of these (an ordinary reshape)."""
    if isinstance(x, Heads):
        if not x.transposed and resolved(shape, x.tensor.shape) == list(x.tensor.shape):
            return x.tensor
        b, s, d = x.tensor.shape
        if resolved(shape, x.tensor.shape) == [b, *((x.heads, s) if x.transposed else
                                                    (s, x.heads)), d // x.heads]:
            return x   # its own shape
        raise Unmappable("a reshape of heads other than merging [B, S, h, d] back to "
                         "[B, S, h*d]")
    if isinstance(x, FlatBatch):
        inner = x.tensor.tensor if isinstance(x.tensor, Shifted) else x.tensor
        wanted = resolved(shape, (math.prod(inner.shape),))
        if wanted == list(inner.shape):
            return x.tensor
        if wanted == [inner.shape[0] * inner.shape[1], *inner.shape[2:]] or \
                (wanted == [math.prod(inner.shape)] and len(inner.shape) == 2):
            return x
        raise Unmappable("a reshape of an activation whose batch is merged, other than "
                         "back to its shape")
    if isinstance(x, Shifted):
        if len(x.tensor.shape) == 2 and resolved(shape, x.tensor.shape) == \
                [math.prod(x.tensor.shape)]:
            return FlatBatch(x)
        raise Unmappable("a reshape of shifted labels other than flattening them")
    if not isinstance(x, Tensor):
        return None
    wanted = resolved(shape, x.shape)
    if len(x.shape) == 3 and len(wanted) == 4 and wanted[:2] == list(x.shape[:2]) and \
            wanted[2] * wanted[3] == x.shape[2]:
        return Heads(x, wanted[2], transposed=False)
    if len(x.shape) >= 2 and wanted == [x.shape[0] * x.shape[1], *x.shape[2:]]:
        return FlatBatch(x)
    return None


def shifted(x: Padded, dim: int, start: Any, end: Any) -> Shifted:
    """Padded labels sliced from ``x.width`` on along the sequence: moved left."""
    if dim % 2 != 1 or start != x.width or (end is not None and end < x.tensor.shape[1]
                                            + x.width):
        raise Unmappable("a slice of padded labels other than moving them left")
    return Shifted(x.tensor, x.width, x.value)


def unshift(ctx: Context, logits: Any, labels: Shifted,
            ignore_index: int) -> tuple[Tensor, Tensor]:
    """A loss over labels moved left, whose last places are ignored: the same loss
    over the positions that have a next token (logits [:, :T-by], labels [:, by:]),
    each a slice op."""
    if labels.ignore != ignore_index or not isinstance(logits, Tensor):
        raise Unmappable("shifted labels padded with other than the loss's ignore_index")
    seq = labels.tensor.shape[1]
    if logits.shape[:2] != labels.tensor.shape or seq <= labels.by:
        raise Unmappable("shifted labels of another shape than the logits")
    b = ctx.builder
    kept = b.add("slice", [logits], {"axis": 1, "start": 0, "stop": seq - labels.by},
                 ctx.free_name(f"{ctx.name}.logits")).outputs[0]
    targets = b.add("slice", [labels.tensor], {"axis": 1, "start": labels.by, "stop": seq},
                    ctx.free_name(f"{ctx.name}.labels")).outputs[0]
    return kept, targets


def resolved(shape: Any, of: tuple[int, ...]) -> list[int]:
    """``shape`` with its -1 worked out for a tensor of shape ``of``."""
    dims = [int(s) for s in shape]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(of) // max(1, known)
    return dims


def transpose(ctx: Context, x: Any, dim0: int, dim1: int) -> Heads | Tensor:
    """Heads between [B, S, h, d] and [B, h, S, d], or two non-batch axes of an
    activation swapped (a transpose op)."""
    if isinstance(x, Heads) and {dim0 % 4, dim1 % 4} == {1, 2}:
        return x.flipped()
    if isinstance(x, Tensor):
        a, b = sorted((dim0 % len(x.shape), dim1 % len(x.shape)))
        if a == b:
            return x
        if a > 0:
            return ctx.builder.add("transpose", [x], {"dims": [a, b]}, ctx.name).outputs[0]
    raise Unmappable("a transpose of the batch dim, or of heads other than between "
                     "[B, S, h, d] and [B, h, S, d]")


def permute(ctx: Context, x: Any, dims: Any) -> Heads:
    if isinstance(x, Heads) and [d % 4 for d in dims] == [0, 2, 1, 3]:
        return x.flipped()
    raise Unmappable("a permutation other than of heads between [B, S, h, d] and "
                     "[B, h, S, d]")


def attention(ctx: Context, q: Any, k: Any, v: Any, attn_mask: Any = None,
              dropout_p: float = 0.0, is_causal: bool = False, *, scale: Any = None,
              enable_gqa: bool = False) -> Heads:
    """scaled_dot_product_attention of heads split from [B, S, D] activations (k and v
    may come from another sequence: cross-attention): the multihead_attention op (its
    projections are the model's own linear ops), causal from ``is_causal`` or from a
    constant mask (``constants.mask_kind``), with T5's relative position bias as its
    mask (``relbias``) and any scale."""
    from flextui.graph.importer import relbias

    if not all(isinstance(t, Heads) and t.transposed for t in (q, k, v)):
        raise Unmappable("q, k and v are not [B, S, D] activations split into heads")
    if dropout_p:
        raise Unmappable(f"attention dropout (dropout_p={dropout_p})")
    if len({q.heads, k.heads, v.heads}) != 1 or enable_gqa:
        raise Unmappable("grouped-query attention (fewer key and value heads than query "
                         "heads)")
    if k.tensor.shape != v.tensor.shape or q.tensor.shape[::2] != k.tensor.shape[::2]:
        raise Unmappable("q, k and v of different batches or widths, or k and v of "
                         "different lengths")
    queries, keys = q.tensor.shape[1], k.tensor.shape[1]
    causal, bias = bool(is_causal), None
    if isinstance(attn_mask, relbias.PositionBias):
        if attn_mask.ids.shape != (queries, keys) or attn_mask.table.shape[1] != q.heads:
            raise Unmappable("a relative position bias of another shape than the scores")
        bias = attn_mask
        if attn_mask.mask is not None:
            causal = constants.mask_kind(Constant(attn_mask.mask), queries, keys)
    elif attn_mask is not None:
        causal = constants.mask_kind(attn_mask, queries, keys)
    head_dim = q.tensor.shape[2] // q.heads
    attrs: dict[str, Any] = {"heads": q.heads, "causal": causal}
    if scale is not None and not math.isclose(scale, head_dim ** -0.5, rel_tol=1e-12):
        attrs["scale"] = float(scale)
    if bias is not None:
        attrs["buckets"] = relbias.buckets(bias)
        attrs["num_buckets"] = bias.table.shape[0]
    op = ctx.builder.add("multihead_attention", [q.tensor, k.tensor, v.tensor], attrs,
                         ctx.name, shared=None if bias is None else owner(bias.table))
    if bias is not None:
        ctx.bind(op.outputs[0], relative_bias=bias.table)
    return Heads(op.outputs[0], q.heads, transposed=True)


def fill_input(ctx: Context, ids: Constant) -> Tensor:
    """The graph input holding what constant ``ids`` hold in every row (positions 0, 1,
    2, ..., or zeros: one token type), [batch, length]: one per kind and length,
    however often the model makes them."""
    fill, length = constants.id_fill(ids)
    made = ctx.fills.get((fill, length))
    if made is None:
        name = ctx.free_name("positions" if fill == "positions" else "token_types")
        attrs = {"shape": [ctx.builder.meta["batch_size"], length],
                 "dtype": "int64", "fill": str(InputFill(fill))}
        made = ctx.fills[(fill, length)] = \
            ctx.builder.add("input", [], attrs, name).outputs[0]
    return made
