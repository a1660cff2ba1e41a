"""Walk an exported program's graph and build the operator graph: placeholders become
inputs (the user's) or parameter references (the module's weights), every call becomes
an op through the ATen table, and what cannot be mapped is gathered, reported all at
once (``UnsupportedOps``). A module that returns logits gets a cross-entropy loss over
an ``int64`` labels input, as flextui's own models end."""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from flextui.errors import GraphError
from flextui.graph.builder import GraphBuilder
from flextui.graph.graph import OpGraph
from flextui.graph.importer import constants, mha, opaque
from flextui.graph.importer.aten import HANDLERS
from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, ParamRef, Unmappable
from flextui.graph.importer.exported import (
    cache_said,
    export,
    module_path,
    source_line,
    target_name,
)
from flextui.graph.importer.module_run import META_KEY, ModuleCall
from flextui.graph.importer.unsupported import Gather, stand_in
from flextui.graph.importer.verify import Verdict, check_import
from flextui.graph.tensor import Tensor


class _Unknown:
    """The value of a node downstream of an op that could not be mapped."""


UNKNOWN = _Unknown()


def import_module(module: Any, example_inputs: tuple[Any, ...], name: str, *,
                  opaque: bool = False) -> OpGraph:
    """The operator graph of ``module`` run on ``example_inputs`` (their first dim is the
    batch), checked against the module (``import_checked``)."""
    return import_checked(module, example_inputs, name, opaque=opaque)[0]


def import_checked(module: Any, example_inputs: tuple[Any, ...], name: str, *,
                   opaque: bool = False) -> tuple[OpGraph, Verdict]:
    """The operator graph of ``module`` run on ``example_inputs``, and whether it was
    compared with the module (``verify``: GraphError when it computes something else).
    GraphError (``UnsupportedOps``) names every op that cannot be mapped, unless
    ``opaque``: each region of such ops then becomes one opaque op, which runs the nodes
    of this export (its program is given to the op here, never named in the graph). The
    graph's ``meta["module_params"]`` names the module parameter each of its parameters
    is, ``meta["module_call"]`` how the module is called (``ModuleCall``)."""
    users = [a for a in example_inputs if isinstance(a, torch.Tensor)]
    if not users or users[0].dim() == 0:
        raise GraphError(f"model {name!r}: its first example input must be a tensor whose "
                         "first dim is the batch")
    with cache_said(module, name):
        program = export(module, example_inputs, name)
        builder = GraphBuilder(name, batch_size=int(users[0].shape[0]), family="imported")
        walk = _Walk(program, module, Context(builder), opaque)
        output = walk.run()
        if walk.gather.seen:
            walk.gather.raise_if_any(name, "" if opaque else
                                     _with_opaque(program, module, name))
        graph = _finish(builder, output, name, walk.inputs)
    graph.meta["module_params"] = dict(walk.ctx.module_params)
    return graph, check_import(graph, module, example_inputs, walk.values, program)


def _with_opaque(program: ExportedProgram, module: Any, name: str) -> str:
    """What ``--opaque`` would do for an import refused without it: the walk again,
    regions of what cannot be mapped made opaque ops."""
    builder = GraphBuilder(name, batch_size=1, family="imported")
    walk = _Walk(program, module, Context(builder), True)
    try:
        output = walk.run()
        if not walk.gather.seen:
            _finish(builder, output, name, walk.inputs)
    except GraphError as exc:
        return f"--opaque does not import it either: {str(exc).splitlines()[0]}"
    if walk.gather.seen:
        first = next(iter(walk.gather.seen.values()))
        return f"--opaque does not import it either: {first.target}: {first.why}"
    count = sum(op.type == "opaque" for op in builder.build().ops)
    return (f"--opaque imports it: these ops become {count} opaque op"
            f"{'s that run' if count != 1 else ' that runs'} the module's own code (searched "
            "and split as whole regions, by samples at most)")


class _NotMapped(Exception):
    """A node no handler maps: its target, and why."""

    def __init__(self, target: str, why: str) -> None:
        super().__init__(why)
        self.target, self.why = target, why


class _Walk:
    """One walk over an exported graph: the value of every node so far, what could not
    be mapped (``gather``), and with ``regions`` (the program opaque ops run) the
    region of such nodes being gathered into an opaque op (``opaque.Pending``)."""

    def __init__(self, program: ExportedProgram, module: torch.nn.Module, ctx: Context,
                 opaque_ops: bool) -> None:
        self.program, self.module, self.ctx = program, module, ctx
        self.regions = opaque.program_of(program) if opaque_ops else None
        self.gather = Gather()
        self.values: dict[Node, Any] = {}
        self.pending = opaque.Pending()
        nodes = program.graph.nodes
        self.order = {node: i for i, node in enumerate(nodes)}
        self.attention = mha.regions(nodes)
        #: the nodes that could not be mapped, and those that read them
        self.tainted: set[Node] = set()
        #: the input ops of the module's own inputs, in its forward's order
        self.inputs: list[str] = []

    def run(self) -> Any:
        """The value of the module's output."""
        output: Any = None
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                value = self.values[node] = _placeholder(node, self.program, self.ctx.builder)
                if isinstance(value, Tensor) and value.producer is not None:
                    self.inputs.append(value.producer.name)
            elif node.op == "call_function" and node not in self.values \
                    and node not in self.pending:
                self._visit(node)
            elif node.op == "output":
                self._close()
                output = _resolve(node.args[0], self.values)
        return output

    def _visit(self, node: Node) -> None:
        path = module_path(node)[0]
        if path in self.attention:
            self._attention(path, self.attention.pop(path))
            return
        reads_pending = any(a in self.pending for a in node.all_input_nodes)
        if reads_pending and (HANDLERS.get(target_name(node.target)) is None
                              or target_name(node.target) == "getitem"):
            self.pending.add(node)
            return
        if reads_pending:
            self._close()
        try:
            self.values[node] = self._call(node)
        except _NotMapped as not_mapped:
            if self.regions is not None:
                self.pending.add(node)
            else:
                self._report(node, not_mapped.target, not_mapped.why)
                self._stand_in([node])

    def _attention(self, path: str, nodes: list[Node]) -> None:
        """An nn.MultiheadAttention's nodes (``mha``): its output's value, the rest
        UNKNOWN (only its own nodes read them)."""
        downstream = any(_any(_resolve((n.args, n.kwargs), self.values), _Unknown)
                         for n in nodes)
        self.values.update(dict.fromkeys(nodes, UNKNOWN))
        if downstream:
            return
        try:
            self.values.update(mha.map_region(self.ctx, self.module, path, nodes, self.values))
        except Unmappable as why:
            if self.regions is not None:
                for n in nodes:
                    del self.values[n]
                    self.pending.add(n)
            else:
                self.gather.add("torch.nn.MultiheadAttention", path, source_line(nodes[0]),
                                str(why))
                self._stand_in(nodes)

    def _close(self) -> None:
        """The region gathered so far becomes an opaque op."""
        if not self.pending.nodes or self.regions is None:
            return
        nodes, first = self.pending.nodes, self.pending.nodes[0]
        self.pending = opaque.Pending()
        self.values.update(dict.fromkeys(nodes, UNKNOWN))
        try:
            with self.ctx.naming((opaque.owner(nodes), True), first):
                self.values.update(opaque.close(self.ctx, nodes, self.values, self.regions))
        except Unmappable as why:
            self._report(first, "an opaque region", str(why))
            self._stand_in(nodes)

    def _stand_in(self, nodes: list[Node]) -> None:
        """Nodes that could not be mapped: what the rest of the graph reads of them
        stands in as tensors of their shapes (``unsupported.stand_in``), so that every
        op after them is still tried, and all that cannot be mapped is said at once."""
        inside = set(nodes)
        for node in nodes:
            self.tainted.add(node)
            if any(user not in inside for user in node.users):
                self.values[node] = stand_in(node.meta.get("val"), node.name) or UNKNOWN

    def _report(self, node: Node, target: str, why: str) -> None:
        downstream = target in HANDLERS and any(a in self.tainted for a in node.all_input_nodes)
        self.gather.add(target, module_path(node)[0], source_line(node), why, downstream)

    def _call(self, node: Node) -> Any:
        args = _resolve(node.args, self.values)
        kwargs = _resolve(node.kwargs, self.values)
        target = target_name(node.target)
        if target in IGNORED:
            return None
        if (target.startswith("aten.") or target == "getitem") \
                and constants.is_plain(args) and constants.is_plain(kwargs):
            # made from buffers and literals alone (a mask, positions, bookkeeping on
            # batch norm's step count): computed as the module does
            try:
                return constants.evaluate(node, args, kwargs)
            except Unmappable as why:
                raise _NotMapped(target, str(why)) from None
        handler = HANDLERS.get(target)
        if handler is None:
            raise _NotMapped(target, "no mapping onto flextui's op types yet")
        remade = next((v for v in (*args, *kwargs.values()) if isinstance(v, opaque.Remade)),
                      None)
        if remade is not None:
            raise _NotMapped(target, f"it reads a {remade.dtype} tensor an opaque region made")
        if _any(args, _Unknown) or _any(kwargs, _Unknown):
            return UNKNOWN  # downstream of an op already reported
        if _reused_after_change(node, self.order):
            raise _NotMapped(target, "an activation changed in place is used again as it "
                             "was before")
        after_unmapped = any(a in self.tainted for a in node.all_input_nodes)
        if after_unmapped:
            self.tainted.add(node)
        try:
            with self.ctx.naming(module_path(node), node):
                return handler(self.ctx, *args, **kwargs)
        except Unmappable as why:
            raise _NotMapped(target, str(why)) from None
        except GraphError:
            if after_unmapped:  # what stands in for an unmapped value does not fit here
                return UNKNOWN
            raise


#: ATen ops that check or record and compute nothing
IGNORED = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_scalar.default"})


def _placeholder(node: Node, program: ExportedProgram,
                 builder: GraphBuilder) -> ParamRef | Constant | Tensor:
    """A parameter, a buffer or lifted constant (its value, a copy), or a user input."""
    signature = program.graph_signature
    params = signature.inputs_to_parameters
    held = {**signature.inputs_to_buffers, **signature.inputs_to_lifted_tensor_constants}
    if node.name in held:
        name = held[node.name]
        state = program.state_dict.get(name)
        value = (program.constants[name] if state is None else state).detach().clone()
        return Constant(value, (value,))
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        raise GraphError(f"model {builder.name!r}: its example input {node.name!r} is "
                         f"{type(value).__name__}, not a tensor; flextui imports modules "
                         "whose inputs are all tensors (pass a tensor, or make the value "
                         "a setting of the module)")
    if node.name in params:
        return ParamRef(params[node.name], tuple(value.shape))
    dtype = str(value.dtype).removeprefix("torch.")
    return builder.input(tuple(int(s) for s in value.shape), dtype=dtype, name=node.name)


def _reused_after_change(node: Node, order: dict[Node, int]) -> bool:
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


def _finish(builder: GraphBuilder, output: Any, name: str, inputs: list[str]) -> OpGraph:
    """The graph, with a loss when the module returns logits; its meta says how the
    module is called (``ModuleCall``: its ``inputs``, which output is its result)."""
    outputs = output if isinstance(output, (list, tuple)) else [output]
    tensors = [t for t in outputs if isinstance(t, Tensor)]
    if len(tensors) != 1:
        raise GraphError(f"model {name!r} returns {len(tensors)} tensors; flextui takes a "
                         "module that returns its logits or its loss")
    result = tensors[0]
    labels_op = None
    if result.producer is None or result.producer.type != "softmax_ce":
        if len(result.shape) not in (2, 4, 5):
            raise GraphError(f"model {name!r} returns a tensor of shape {list(result.shape)}; "
                             "return (batch, classes) logits, per-pixel (batch, classes, "
                             "height, width) logits or a cross-entropy loss")
        # torch's convention: the classes along dim 1, a label per pixel
        labels = builder.input(result.shape[:1] + result.shape[2:], dtype="int64",
                               name="labels")
        labels_op = labels.producer.name if labels.producer else None
        builder.softmax_ce(result, labels, name="loss", class_dim=1)
    builder.meta[META_KEY] = ModuleCall(tuple(inputs), outputs.index(result),
                                        labels_op).to_meta()
    return builder.build()
