"""``torch.nn.MultiheadAttention``, recognised by the module that ran its nodes
(``nn_module_stack``) and mapped whole: its packed input projection as one linear op
(two for cross-attention: the query's rows of the packed weight, and the key and
value's), the split into q, k and v, the multihead_attention op (causal as the
module's own scaled_dot_product_attention call is: ``is_causal``, or a constant mask)
and its output projection. Its nodes one by one (an unflatten, selects, transposes of
the sequence-first layout) have no meaning of their own to partition."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from torch.fx import Node

from flextui.graph.importer import constants
from flextui.graph.importer.context import Context, ParamRef, Unmappable
from flextui.graph.importer.exported import module_path, module_type, target_name
from flextui.graph.tensor import Tensor

if TYPE_CHECKING:
    import torch

MHA_TYPE = "torch.nn.modules.activation.MultiheadAttention"


def regions(nodes: Iterable[Node]) -> dict[str, list[Node]]:
    """The nodes each nn.MultiheadAttention ran, by its module path, in graph order."""
    found: dict[str, list[Node]] = {}
    for node in nodes:
        if node.op == "call_function" and module_type(node) == MHA_TYPE:
            found.setdefault(module_path(node)[0], []).append(node)
    return found


def map_region(ctx: Context, root: torch.nn.Module, path: str, nodes: list[Node],
               values: dict[Node, Any]) -> dict[Node, Tensor]:
    """The values of the region's nodes that the rest of the graph reads (its attention
    output), after adding its ops. Unmappable when the module is used in a way the
    multihead_attention op does not cover."""
    mha = root.get_submodule(path)
    if not mha.batch_first:
        raise Unmappable("batch_first=False (the batch must be dim 0)")
    if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
        raise Unmappable("kdim/vdim, add_bias_kv or add_zero_attn")
    if mha.dropout and mha.training:
        raise Unmappable(f"attention dropout ({mha.dropout})")
    inside = set(nodes)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    if len(outputs) != 1:
        raise Unmappable("its attention weights are used (pass need_weights=False)")
    projections = [n for n in nodes if target_name(n.target) == "aten.linear.default"][:-1]
    query, *memory = (_activation(n, inside, values) for n in projections)
    if len(memory) > 1 or (memory and memory[0] is query):
        raise Unmappable("key and value that are different tensors (only self-attention, "
                         "or cross-attention with key = value, maps)")
    attention = [n for n in nodes if target_name(n.target) == SDPA]
    if len(attention) != 1:
        raise Unmappable("its attention is not one scaled_dot_product_attention call")
    causal = _causal(attention[0], inside, values)
    width, bias = mha.embed_dim, mha.in_proj_bias is not None
    b = ctx.builder
    refs = {"weight": _ref(mha, path, "in_proj_weight"), "bias": _ref(mha, path, "in_proj_bias")}
    if not memory:
        qkv = ctx.bind(b.linear(query, 3 * width, bias=bias, name=f"{path}.in_proj",
                                shared=f"{path}.in_proj"), **refs)
        q, k, v = b.split(qkv, [width] * 3, axis=2, name=f"{path}.split")
    else:
        q = ctx.bind(b.linear(query, width, bias=bias, name=f"{path}.q_proj",
                              shared=f"{path}.in_proj", rows=(0, 3 * width)), **refs)
        kv = ctx.bind(b.linear(memory[0], 2 * width, bias=bias, name=f"{path}.kv_proj",
                               shared=f"{path}.in_proj", rows=(width, 3 * width)), **refs)
        k, v = b.split(kv, [width] * 2, axis=2, name=f"{path}.split")
    heads = b.multihead_attention(q, k, v, mha.num_heads, causal=causal,
                                  name=f"{path}.attention")
    out = ctx.bind(b.linear(heads, width, bias=mha.out_proj.bias is not None,
                            name=f"{path}.out_proj", shared=f"{path}.out_proj"),
                   weight=_ref(mha, path, "out_proj.weight"),
                   bias=_ref(mha, path, "out_proj.bias"))
    return {outputs[0]: out}


SDPA = "aten.scaled_dot_product_attention.default"


def _activation(node: Node, inside: set[Node], values: dict[Node, Any]) -> Tensor:
    """The activation from outside the region that a projection's input is (through
    the region's transposes of the sequence-first layout)."""
    while node in inside:
        node = node.args[0]  # type: ignore[assignment]
    value = values.get(node)
    if not isinstance(value, Tensor):
        raise Unmappable("its query, key or value is not an activation")
    return value


def _causal(call: Node, inside: set[Node], values: dict[Node, Any]) -> bool:
    """Whether the module's scaled_dot_product_attention ``call`` is causal: its
    ``is_causal``, or a mask (from outside the region, through the region's own
    reshapes of it) that is causal; Unmappable for any other mask."""
    mask = call.args[3] if len(call.args) > 3 else call.kwargs.get("attn_mask")
    is_causal = call.args[5] if len(call.args) > 5 else call.kwargs.get("is_causal", False)
    if mask is None:
        return bool(is_causal)
    q, k = (cast(Node, a).meta["val"] for a in call.args[:2])
    queries, keys = q.shape[-2], k.shape[-2]
    return constants.mask_kind(constants.fold(mask, inside, values), queries, keys)


def _ref(mha: torch.nn.Module, path: str, name: str) -> ParamRef | None:
    param = mha.get_parameter(name) if _has(mha, name) else None
    return None if param is None else ParamRef(f"{path}.{name}", tuple(param.shape))


def _has(module: torch.nn.Module, name: str) -> bool:
    owner, _, leaf = name.rpartition(".")
    holder = module.get_submodule(owner) if owner else module
    return getattr(holder, leaf, None) is not None
