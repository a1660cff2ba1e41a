"""Walk an exported program's graph and build the operator graph: placeholders become
inputs (the user's) or parameter references (the module's weights), every call becomes
an op through the ATen table, and what cannot be mapped is gathered, reported all at
once (``UnsupportedOps``). A module that returns logits gets a cross-entropy loss over
an ``int64`` labels input, as flextui's own models end."""

from __future__ import annotations

from typing import Any

from torch.fx import Node

from flextui.errors import GraphError
from flextui.graph.builder import GraphBuilder
from flextui.graph.graph import OpGraph
from flextui.graph.importer import mha
from flextui.graph.importer.aten import HANDLERS
from flextui.graph.importer.context import Context, Dropped, ParamRef, Unmappable
from flextui.graph.importer.exported import export, module_path, source_line, target_name
from flextui.graph.importer.unsupported import Gather
from flextui.graph.tensor import Tensor


class _Unknown:
    """The value of a node downstream of an op that could not be mapped."""


UNKNOWN = _Unknown()


def import_module(module: Any, example_inputs: tuple, name: str) -> OpGraph:
    """The operator graph of ``module`` run on ``example_inputs`` (their first dim is the
    batch). GraphError (``UnsupportedOps``) names every op that cannot be mapped. The
    graph's ``meta["module_params"]`` names the module parameter each of its parameters
    is."""
    import torch

    program = export(module, example_inputs, name)
    signature = program.graph_signature
    params = dict(signature.inputs_to_parameters)
    buffers = dict(signature.inputs_to_buffers)
    users = [a for a in example_inputs if isinstance(a, torch.Tensor)]
    if not users or users[0].dim() == 0:
        raise GraphError(f"model {name!r}: its first example input must be a tensor whose "
                         "first dim is the batch")
    builder = GraphBuilder(name, batch_size=int(users[0].shape[0]), family="imported")
    ctx = Context(builder)
    gather = Gather()
    values: dict[Any, Any] = {}
    output: Any = None
    order = {node: i for i, node in enumerate(program.graph.nodes)}
    attention = mha.regions(program.graph.nodes)
    for node in program.graph.nodes:
        if node.op == "placeholder":
            values[node] = _placeholder(node, params, buffers, builder)
        elif node.op == "call_function" and module_path(node)[0] in attention:
            path = module_path(node)[0]
            values.update(_region(module, path, attention.pop(path), values, ctx, gather))
        elif node.op == "call_function" and node not in values:
            values[node] = _call(node, values, ctx, gather, order)
        elif node.op == "output":
            output = node.args[0]
    gather.raise_if_any(name)
    graph = _finish(builder, _resolve(output, values), name)
    graph.meta["module_params"] = dict(ctx.module_params)
    return graph


def _region(module: Any, path: str, nodes: list[Any], values: dict[Any, Any], ctx: Context,
            gather: Gather) -> dict[Any, Any]:
    """The values of an nn.MultiheadAttention's nodes (``mha``): its output's, the rest
    UNKNOWN (only its own nodes read them)."""
    mapped: dict[Any, Any] = dict.fromkeys(nodes, UNKNOWN)
    if any(_any(_resolve((n.args, n.kwargs), values), _Unknown) for n in nodes):
        return mapped
    try:
        mapped.update(mha.map_region(ctx, module, path, nodes, values))
    except Unmappable as why:
        gather.add("torch.nn.MultiheadAttention", path, source_line(nodes[0]), str(why))
    return mapped


def _placeholder(node: Any, params: dict[str, str], buffers: dict[str, str],
                 builder: GraphBuilder) -> Any:
    value = node.meta.get("val")
    if node.name in params:
        return ParamRef(params[node.name], tuple(value.shape))
    if node.name in buffers:
        return Dropped(buffers[node.name])
    dtype = str(value.dtype).removeprefix("torch.")
    return builder.input(tuple(int(s) for s in value.shape), dtype=dtype, name=node.name)


def _call(node: Any, values: dict[Any, Any], ctx: Context, gather: Gather,
          order: dict[Any, int]) -> Any:
    args = _resolve(node.args, values)
    kwargs = _resolve(node.kwargs, values)
    target = target_name(node.target)
    if _any(args, Dropped) and not _any(args, Tensor):
        return Dropped(target)  # bookkeeping on buffers (batch norm's step count)
    handler = HANDLERS.get(target)
    module, source = module_path(node), source_line(node)
    if handler is None:
        gather.add(target, module[0], source, "no mapping onto flextui's op types yet")
        return UNKNOWN
    if _any(args, _Unknown) or _any(kwargs, _Unknown):
        return UNKNOWN  # downstream of an op already reported
    if _reused_after_change(node, order):
        gather.add(target, module[0], source, "an activation changed in place is used again "
                   "as it was before")
        return UNKNOWN
    try:
        with ctx.naming(module, node):
            return handler(ctx, *args, **kwargs)
    except Unmappable as why:
        gather.add(target, module[0], source, str(why))
        return UNKNOWN


def _reused_after_change(node: Any, order: dict[Any, int]) -> bool:
    """An in-place op (``add_``) is mapped as its out-of-place twin, whose output later
    ops read (torch.export points them at it). That is wrong when the changed tensor is
    read after the change another way: through a view taken before it (conservatively,
    any other reader of the tensor whose own readers come after the change)."""
    name = target_name(node.target)
    changed: Any = node.args[0] if node.args else None
    if not (name.startswith("aten.") and name.split(".")[1].endswith("_") and
            _is_node(changed)):
        return False
    after = order[node]
    return any(order[user] > after or any(order[u] > after for u in user.users)
               for user in changed.users if user is not node)


def _resolve(value: Any, values: dict[Any, Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, values) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, values) for k, v in value.items()}
    return values.get(value, value) if _is_node(value) else value


def _is_node(value: Any) -> bool:
    return isinstance(value, Node)


def _any(value: Any, kind: type) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_any(v, kind) for v in value)
    if isinstance(value, dict):
        return any(_any(v, kind) for v in value.values())
    return isinstance(value, kind)


def _finish(builder: GraphBuilder, output: Any, name: str) -> OpGraph:
    """The graph, with a loss when the module returns logits."""
    outputs = output if isinstance(output, (list, tuple)) else [output]
    tensors = [t for t in outputs if isinstance(t, Tensor)]
    if len(tensors) != 1:
        raise GraphError(f"model {name!r} returns {len(tensors)} tensors; flextui takes a "
                         "module that returns its logits or its loss")
    result = tensors[0]
    if result.producer is None or result.producer.type != "softmax_ce":
        if len(result.shape) != 2:
            raise GraphError(f"model {name!r} returns a tensor of shape {list(result.shape)}; "
                             "return (batch, classes) logits or a cross-entropy loss")
        labels = builder.input((result.shape[0],), dtype="int64", name="labels")
        builder.softmax_ce(result, labels, name="loss")
    return builder.build()
