"""``--opaque``: the parts of a module the importer cannot map op by op, each folded
into one opaque op (``graph.ops.opaque``) that runs the exported graph's own nodes.

While the walk meets nodes it cannot map, it gathers them (``Pending``); the first
mappable node that reads one of them closes the region: its inputs are the
activations, parameters and buffers its nodes read from outside, its outputs the
nodes read from outside. At import the region runs once on random inputs of its
shapes: to count the work it does (``Work``: torch's FLOP counter, on the composite
path that oneDNN's fused kernels skip, so an LSTM's matrix products count; the kernels
it runs and the bytes they read and write) and to test whether it is batch-wise (each
half of a batch alone gives that half of the outputs), which lets the search split it
by samples. The op's attributes name its nodes; what runs them is the exported program,
given to the op in this process (``kernels.opaque.bind_program``); a rank gives the
program of its own export of the same module (``program_of``)."""

from __future__ import annotations

import contextlib
import operator
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, ParamRef, Unmappable
from flextui.graph.importer.exported import module_path
from flextui.graph.kernels.opaque import RegionProgram, bind_program, run_nodes
from flextui.graph.tensor import DTYPE_BYTES, FLOAT_DTYPES, Tensor


class Pending:
    """The nodes of the region being gathered, in graph order."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def __contains__(self, node: object) -> bool:
        return node in self.nodes

    def add(self, node: Node) -> None:
        self.nodes.append(node)


@dataclass(frozen=True)
class Remade:
    """A region's result of a dtype ops do not pass each other (a bool mask), or a float
    one of a region that reads no float tensor (rotary tables from positions: made in
    the dtype of the export, not of the run): whatever reads it is unmapped, and the
    region it joins runs the nodes that make it again."""

    dtype: str


def close(ctx: Context, nodes: list[Node], values: dict[Node, Any],
          program: RegionProgram) -> dict[Node, Tensor | Remade]:
    """The opaque op of a region's ``nodes`` of ``program``: the values of the nodes
    read from outside (its outputs; ``Remade`` for one of a dtype ops do not pass, and
    no op when all are). Unmappable when the region reads or makes something other than
    tensors. What the region reads that the graph holds as no tensor (``arange(n)``'s
    positions, an activation split into heads: ``views``; a ``Remade`` result) runs in
    the region again, from the tensors it came from."""
    made = set(nodes)
    outputs = [n for n in nodes if any(u not in made for u in n.users)]
    nodes = _views(nodes, values) + nodes
    inside = set(nodes)
    reads = list(dict.fromkeys(a for n in nodes for a in n.all_input_nodes if a not in inside))
    inputs = [a for a in reads if isinstance(values.get(a), Tensor)]
    params = [a for a in reads if isinstance(values.get(a), ParamRef)]
    constants = [a for a in reads if isinstance(values.get(a), Constant) and a.op == "placeholder"]
    odd = [a for a in reads if a not in (*inputs, *params, *constants)]
    if odd:
        raise Unmappable(f"the region reads {odd[0].name}, which is not a tensor")
    if not outputs or not all(isinstance(n.meta.get("val"), torch.Tensor) for n in outputs):
        raise Unmappable("the region's results are not all tensors")
    # a region with no float operand computes at the dtype it was exported with: its
    # float results are computed again where a float operand says the block's dtype
    computed = bool(params) or any(values[a].dtype in FLOAT_DTYPES for a in inputs)
    remade: dict[Node, Tensor | Remade] = {
        n: Remade(_dtype(n)) for n in outputs
        if _dtype(n) not in DTYPE_BYTES or (_dtype(n) in FLOAT_DTYPES and not computed)}
    outputs = [n for n in outputs if n not in remade]
    if not outputs:
        return remade
    batch = int(ctx.builder.meta["batch_size"])
    work, batchwise = _measure(nodes, inputs, params, constants, outputs, program.known,
                               batch)
    attrs = {"nodes": [n.name for n in nodes],
             "inputs": [a.name for a in inputs], "params": [a.name for a in params],
             "constants": [a.name for a in constants],
             "outputs": [[n.name, list(n.meta["val"].shape), _dtype(n)] for n in outputs],
             "param_shapes": [list(values[a].shape) for a in params],
             "batch": batch, "batchwise": batchwise, "flops": work.flops,
             "bytes": work.bytes, "kernels": work.kernels}
    op = ctx.builder.add("opaque", [values[a] for a in inputs], attrs, ctx.name)
    bind_program(op, program)
    ctx.bind(op.outputs[0], **{f"p{i}": values[a] for i, a in enumerate(params)})
    return {**remade, **dict(zip(outputs, op.outputs))}


def _dtype(node: Node) -> str:
    return str(node.meta["val"].dtype).removeprefix("torch.")


def _views(nodes: list[Node], values: dict[Node, Any]) -> list[Node]:
    """The nodes outside ``nodes`` that they read and that the graph holds as something
    other than a tensor or a parameter (positions, an activation split into heads,
    bookkeeping on a buffer), with the nodes those come from back to such values or to
    placeholders (buffers), in graph order."""
    made, wanted = set(nodes), set()
    stack = [a for n in nodes for a in n.all_input_nodes if a not in made]
    while stack:
        node = stack.pop()
        if node in wanted or node in made or node.op != "call_function" or \
                isinstance(values.get(node), (Tensor, ParamRef)):
            continue
        wanted.add(node)
        stack.extend(node.all_input_nodes)
    graph_order = {n: i for i, n in enumerate(nodes[0].graph.nodes)}
    return sorted(wanted, key=graph_order.__getitem__)


def owner(nodes: list[Node]) -> str:
    """The module a region is named after: the innermost one that ran all its nodes
    ("lstm", "encoder.layer.0.attention"), but those that take an item of a result (a
    tuple's unpacking runs where the result is used); when that is the top level, the
    module of its first node run by one (an LSTM whose output the model indexes: "lstm");
    "" when none is."""
    computing = [n for n in nodes if n.target is not operator.getitem] or nodes
    paths = [module_path(n)[0] for n in computing]
    common: list[str] = []
    for parts in zip(*(p.split(".") for p in paths)):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return ".".join(common) or next((p for p in paths if p), "")


def program_of(program: ExportedProgram) -> RegionProgram:
    """What opaque ops run of the exported ``program``: its nodes by name, and its
    parameters, buffers and lifted constants by placeholder."""
    signature, state = program.graph_signature, program.state_dict
    found = {**{p: state[n] for p, n in signature.inputs_to_parameters.items()},
             **{p: state[n] if n in state else program.constants[n]
                for p, n in signature.inputs_to_buffers.items()},
             **{p: program.constants[n]
                for p, n in signature.inputs_to_lifted_tensor_constants.items()}}
    return RegionProgram({n.name: n for n in program.graph.nodes},
                         {p: v.detach() for p, v in found.items()})


@dataclass(frozen=True)
class Work:
    """What a region's forward pass does on the whole batch: FLOPs (a multiply-add counts
    2), the kernels it runs and the bytes they read and write (views move none)."""

    flops: float
    bytes: int
    kernels: int


class _Traffic(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the kernels a run dispatches and the bytes of their tensors, in and out."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.kernels = self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            self.kernels += 1
            self.bytes += sum(t.numel() * t.element_size()
                              for t in tree_leaves((args, kwargs, out))
                              if isinstance(t, torch.Tensor))
        return out


@contextlib.contextmanager
def _composite() -> Iterator[None]:
    """Run on torch's composite path: without oneDNN's fused kernels (an LSTM's
    ``mkldnn_rnn_layer``), which have no FLOP formula (their parts do) and are not what
    runs in float64 or on a GPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flags say TF32 is on for Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False):
            yield


def _measure(nodes: list[Node], inputs: list[Node], params: list[Node], constants: list[Node],
             outputs: list[Node], known: Mapping[str, torch.Tensor],
             batch: int) -> tuple[Work, bool]:
    """The region's work on the whole batch (its FLOPs counted on the composite path),
    and whether it is batch-wise, on both paths."""
    gen = torch.Generator().manual_seed(0)
    env = {a.name: _random(a.meta["val"], gen) for a in inputs}
    env.update({a.name: known[a.name] for a in (*params, *constants)})
    names = [n.name for n in outputs]

    def run(rows: slice | None = None) -> list[Any]:
        """The outputs of the region on the batch, or on ``rows`` of each input."""
        return run_nodes(nodes, env if rows is None else
                         {**env, **{a.name: env[a.name][rows] for a in inputs}}, names)

    with torch.no_grad(), _Traffic() as traffic:
        fused = run()
    with torch.no_grad(), _composite(), FlopCounterMode(display=False) as counter:
        composite = run()
    work = Work(float(counter.get_total_flops()), traffic.bytes, traffic.kernels)
    rows = [a.meta["val"].shape for a in inputs] + [n.meta["val"].shape for n in outputs]
    if batch < 2 or not all(len(s) and s[0] == batch for s in rows):
        return work, False
    with torch.no_grad():
        batchwise = _by_samples(run, fused, batch)
        with _composite():
            batchwise = batchwise and _by_samples(run, composite, batch)
    return work, batchwise


def _by_samples(run: Callable[[slice], list[Any]], whole: list[Any], batch: int) -> bool:
    """Whether each half of the batch alone gives its half of ``whole`` (a region that
    makes a tensor of its batch's size, an LSTM's first state, does not: it fails or
    broadcasts)."""
    for half in (slice(0, batch // 2), slice(batch // 2, batch)):
        try:
            part = run(half)
        except Exception:  # noqa: BLE001 (a region tied to its batch size fails any way)
            return False
        if not all(p.shape == w[half].shape and torch.allclose(p, w[half], rtol=1e-5, atol=1e-6)
                   for p, w in zip(part, whole)):
            return False
    return True


def _random(value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if value.dtype.is_floating_point:
        return torch.randn(tuple(value.shape), generator=gen, dtype=value.dtype)
    return torch.zeros(tuple(value.shape), dtype=value.dtype)
