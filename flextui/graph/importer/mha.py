"""``torch.nn.MultiheadAttention``, recognised by the module that ran its nodes
(``nn_module_stack``) and mapped whole: its packed input projection as one linear op,
the split into q, k and v, the multihead_attention op and its output projection. Its
nodes one by one (an unflatten, selects, transposes of the sequence-first layout) have
no meaning of their own to partition."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torch.fx import Node

from flextui.graph.importer.context import Context, ParamRef, Unmappable
from flextui.graph.importer.exported import module_path, module_type
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
    inside = set(nodes)
    activations = list(dict.fromkeys(
        values[a] for n in nodes for a in (*n.args, *n.kwargs.values())
        if isinstance(a, Node) and a in values and a not in inside
        and isinstance(values[a], Tensor)))
    if not mha.batch_first:
        raise Unmappable("batch_first=False (the batch must be dim 0)")
    if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
        raise Unmappable("kdim/vdim, add_bias_kv or add_zero_attn")
    if mha.dropout and mha.training:
        raise Unmappable(f"attention dropout ({mha.dropout})")
    if len(activations) != 1:
        raise Unmappable("cross-attention or a mask (only self-attention, query = key = "
                         "value, maps)")
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    (x,) = activations
    if len(outputs) != 1:
        raise Unmappable("its attention weights are used (pass need_weights=False)")
    width, bias = mha.embed_dim, mha.in_proj_bias is not None
    b = ctx.builder
    qkv = ctx.bind(b.linear(x, 3 * width, bias=bias, name=f"{path}.in_proj",
                            shared=f"{path}.in_proj"),
                   weight=_ref(mha, path, "in_proj_weight"),
                   bias=_ref(mha, path, "in_proj_bias"))
    q, k, v = b.split(qkv, [width] * 3, axis=2, name=f"{path}.split")
    heads = b.multihead_attention(q, k, v, mha.num_heads, causal=False,
                                  name=f"{path}.attention")
    out = ctx.bind(b.linear(heads, width, bias=mha.out_proj.bias is not None,
                            name=f"{path}.out_proj", shared=f"{path}.out_proj"),
                   weight=_ref(mha, path, "out_proj.weight"),
                   bias=_ref(mha, path, "out_proj.bias"))
    return {outputs[0]: out}


def _ref(mha: torch.nn.Module, path: str, name: str) -> ParamRef | None:
    param = mha.get_parameter(name) if _has(mha, name) else None
    return None if param is None else ParamRef(f"{path}.{name}", tuple(param.shape))


def _has(module: torch.nn.Module, name: str) -> bool:
    owner, _, leaf = name.rpartition(".")
    holder = module.get_submodule(owner) if owner else module
    return getattr(holder, leaf, None) is not None
