"""Values a module computes from its buffers and literals alone, never from its inputs
or weights: attention masks (``torch.triu(torch.full(...))``, a mask buffer, Hugging
Face's mask construction), positions (``torch.arange``), rotary tables. The importer
computes them (``Constant``) as the module does, then reads what they mean where an op
takes one: a mask is causal or hides nothing (``mask_kind``), ids are positions or one
token type (``id_fill``). A constant read any other way is reported."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Node

from flextui.graph.importer.context import Unmappable

#: the most elements a constant may have (a mask of batch x 4096 x 4096 has fewer)
MOST_ELEMENTS = 1 << 28


@dataclass(frozen=True, eq=False)
class Constant:
    """A value computed without the module's inputs or weights: ``value`` as the
    module's own code makes it, and ``sources``, the buffers it is made from."""

    value: Any
    sources: tuple[torch.Tensor, ...] = ()

    @property
    def tensor(self) -> torch.Tensor | None:
        return self.value if isinstance(self.value, torch.Tensor) else None


def is_plain(value: Any) -> bool:
    """Whether ``value`` holds no tensor of the graph (only constants and literals)."""
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(is_plain(v) for v in value.values())
    return isinstance(value, Constant) or value is None or isinstance(
        value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                torch.memory_format))


def evaluate(node: Node, args: Any, kwargs: Any) -> Constant:
    """Run ``node`` on constant ``args`` as the module did; Unmappable when it fails or
    makes a value too large to hold."""
    found: dict[int, torch.Tensor] = {}

    def unwrap(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(unwrap(v) for v in value)
        if isinstance(value, dict):
            return {k: unwrap(v) for k, v in value.items()}
        if isinstance(value, Constant):
            found.update((id(t), t) for t in value.sources)
            return value.value
        return value

    plain_args, plain_kwargs = unwrap(args), unwrap(kwargs)
    try:
        with torch.no_grad():
            result = node.target(*plain_args, **plain_kwargs)  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 (any op can refuse its arguments)
        raise Unmappable(f"computing a constant failed ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    tensors = result if isinstance(result, (list, tuple)) else [result]
    if sum(t.numel() for t in tensors if isinstance(t, torch.Tensor)) > MOST_ELEMENTS:
        raise Unmappable("a constant larger than flextui holds at import")
    return Constant(result, tuple(found.values()))


def allowed(mask: torch.Tensor) -> torch.Tensor | None:
    """Where an attention mask lets a query see a key (True), or None when it is not a
    plain mask: a boolean one, or an additive one of 0 (seen) and -inf or the dtype's
    least value (hidden)."""
    if mask.dtype == torch.bool:
        return mask
    if not mask.is_floating_point():
        return None
    hidden = (mask == -math.inf) | (mask == torch.finfo(mask.dtype).min)
    return ~hidden if bool(((mask == 0) | hidden).all()) else None


def mask_kind(mask: Any, queries: int, keys: int) -> bool:
    """Whether the attention ``mask`` (a Constant) is causal (each query sees the keys
    up to its own position, torch's ``is_causal``) rather than hiding nothing;
    Unmappable for any other mask, or one made from the inputs (a padding mask)."""
    tensor = mask.tensor if isinstance(mask, Constant) else None
    if tensor is None:
        raise Unmappable("an attention mask computed from the inputs (a padding mask): "
                         "only a causal mask, or none, maps")
    seen = allowed(tensor)
    if seen is None:
        raise Unmappable("an attention mask of values other than 0 and -inf (a bias)")
    try:
        seen = seen.expand(*seen.shape[:-2], queries, keys).reshape(-1, queries, keys)
    except RuntimeError:
        raise Unmappable(f"an attention mask of shape {list(tensor.shape)} for "
                         f"{queries} queries and {keys} keys") from None
    causal = torch.ones(queries, keys, dtype=torch.bool).tril()
    if bool(seen.all()):
        return False
    if bool((seen == causal).all()):
        return True
    raise Unmappable("an attention mask that is neither causal nor all-seeing (a padding "
                     "or sliding-window mask)")


def id_fill(ids: Constant) -> tuple[str, int]:
    """What constant ids read by an embedding hold in every row: ``("positions", n)``
    (0, 1, ..., n-1) or ``("zeros", n)``; Unmappable otherwise."""
    tensor = ids.tensor
    if tensor is None or tensor.dtype.is_floating_point or tensor.dim() == 0:
        raise Unmappable("ids that are a constant other than an integer tensor")
    rows = tensor.reshape(-1, tensor.shape[-1])
    length = rows.shape[1]
    if bool((rows == torch.arange(length)).all()):
        return "positions", length
    if bool((rows == 0).all()):
        return "zeros", length
    raise Unmappable("constant ids other than positions (0, 1, ..., n-1) or zeros in "
                     "every row")


def fold(node: Any, inside: set[Node], values: dict[Node, Any]) -> Any:
    """The value of ``node`` for a region of nodes not mapped one by one
    (``inside``): a node outside it has its value so far; one inside is computed from
    its own arguments when they are all constants (a module's reshapes of its mask)."""
    if not isinstance(node, Node):
        return node
    if node not in inside:
        return values.get(node)
    args = torch.fx.node.map_aggregate(node.args, lambda a: fold(a, inside, values))
    kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: fold(a, inside, values))
    if not (is_plain(args) and is_plain(kwargs)):
        return None
    return evaluate(node, args, kwargs)
