"""``--opaque``: the parts of a module the importer cannot map op by op, each folded
into one opaque op (``graph.ops.opaque``) that runs the exported graph's own nodes.

While the walk meets nodes it cannot map, it gathers them (``Pending``); the first
mappable node that reads one of them closes the region: its inputs are the
activations, parameters and buffers its nodes read from outside, its outputs the
nodes read from outside. At import the region runs once on random inputs of its
shapes: to count its FLOPs and to test whether it is batch-wise (each half of a batch
alone gives that half of the outputs), which lets the search split it by
samples. The op's attributes name its nodes; what runs them is the exported program,
given to the op in this process (``kernels.opaque.bind_program``); a rank gives the
program of its own export of the same module (``program_of``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.utils.flop_counter import FlopCounterMode

from flextui.graph.importer.constants import Constant
from flextui.graph.importer.context import Context, ParamRef, Unmappable
from flextui.graph.kernels.opaque import RegionProgram, bind_program, run_nodes
from flextui.graph.tensor import Tensor


class Pending:
    """The nodes of the region being gathered, in graph order."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def __contains__(self, node: object) -> bool:
        return node in self.nodes

    def add(self, node: Node) -> None:
        self.nodes.append(node)


def close(ctx: Context, nodes: list[Node], values: dict[Node, Any],
          program: RegionProgram) -> dict[Node, Tensor]:
    """The opaque op of a region's ``nodes`` of ``program``: the values of the nodes
    read from outside (its outputs). Unmappable when the region reads or makes
    something other than tensors."""
    inside = set(nodes)
    reads = list(dict.fromkeys(a for n in nodes for a in n.all_input_nodes if a not in inside))
    inputs = [a for a in reads if isinstance(values.get(a), Tensor)]
    params = [a for a in reads if isinstance(values.get(a), ParamRef)]
    constants = [a for a in reads if isinstance(values.get(a), Constant) and a.op == "placeholder"]
    odd = [a for a in reads if a not in (*inputs, *params, *constants)]
    if odd:
        raise Unmappable(f"the region reads {odd[0].name}, which is not a tensor")
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    if not outputs or not all(isinstance(n.meta.get("val"), torch.Tensor) for n in outputs):
        raise Unmappable("the region's results are not all tensors")
    batch = int(ctx.builder.meta["batch_size"])
    flops, batchwise = _measure(nodes, inputs, params, constants, outputs, program.known,
                                batch)
    attrs = {"nodes": [n.name for n in nodes],
             "inputs": [a.name for a in inputs], "params": [a.name for a in params],
             "constants": [a.name for a in constants],
             "outputs": [[n.name, list(n.meta["val"].shape),
                          str(n.meta["val"].dtype).removeprefix("torch.")] for n in outputs],
             "param_shapes": [list(values[a].shape) for a in params],
             "batch": batch, "batchwise": batchwise, "flops": flops}
    op = ctx.builder.add("opaque", [values[a] for a in inputs], attrs, ctx.name)
    bind_program(op, program)
    ctx.bind(op.outputs[0], **{f"p{i}": values[a] for i, a in enumerate(params)})
    return dict(zip(outputs, op.outputs))


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


def _measure(nodes: list[Node], inputs: list[Node], params: list[Node], constants: list[Node],
             outputs: list[Node], known: Mapping[str, torch.Tensor],
             batch: int) -> tuple[float, bool]:
    """The region's forward FLOPs on the whole batch, and whether it is batch-wise."""
    gen = torch.Generator().manual_seed(0)
    env = {a.name: _random(a.meta["val"], gen) for a in inputs}
    env.update({a.name: known[a.name] for a in (*params, *constants)})
    names = [n.name for n in outputs]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        whole = run_nodes(nodes, env, names)
    flops = float(counter.get_total_flops())
    rows = [a.meta["val"].shape for a in inputs] + [n.meta["val"].shape for n in outputs]
    if batch < 2 or not all(len(s) and s[0] == batch for s in rows):
        return flops, False
    for half in (slice(0, batch // 2), slice(batch // 2, batch)):
        part_env = {**env, **{a.name: env[a.name][half] for a in inputs}}
        try:
            with torch.no_grad():
                part = run_nodes(nodes, part_env, names)
        except Exception:  # noqa: BLE001 (a region tied to its batch size fails any way)
            return flops, False
        if not all(p.shape == w[half].shape and
                   torch.allclose(p, w[half], rtol=1e-5, atol=1e-6)
                   for p, w in zip(part, whole)):
            return flops, False
    return flops, True


def _random(value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if value.dtype.is_floating_point:
        return torch.randn(tuple(value.shape), generator=gen, dtype=value.dtype)
    return torch.zeros(tuple(value.shape), dtype=value.dtype)
