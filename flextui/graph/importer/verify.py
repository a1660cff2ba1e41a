"""The importer's own check: the module and the graph imported from it, run once each on
the example inputs in float64, must agree on the loss and on every parameter's
gradient to ``TOLERANCE`` relative, or the import changed the model's meaning and is
refused, naming the first op whose output differs from the module's.

Each side runs as it trains: the graph through flextui's kernels (``run_whole``), the
module by plain PyTorch on a float64 copy of itself, with dropout's masks drawn as
flextui draws them (``module_run.flextui_terms``). Where the first difference lies is
found by running the exported program's nodes in float64 beside the graph's ops.

A model too large to run twice in float64 here (``Estimate``: its parameters and
activations against the memory this machine has free, its FLOPs against
``CHECK_FLOPS``) is not checked at the batch it was imported at; ``TorchModel.build``
then checks a copy at a smaller batch, or says that it skipped the check."""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from flextui.errors import GraphError
from flextui.graph.graph import OpGraph
from flextui.graph.importer.exported import source_line, target_name
from flextui.graph.importer.module_run import ModuleCall, flextui_terms, module_loss
from flextui.graph.importer.opaque import program_of
from flextui.graph.kernels.whole import relative_error, run_whole
from flextui.graph.op import Op
from flextui.graph.ops.basic import InputFill
from flextui.graph.tensor import Tensor

TOLERANCE = 1e-9
#: the most FLOPs (both sides, forward and backward) the check spends at import: a few
#: seconds of float64 on one CPU core
CHECK_FLOPS = 2e10
#: the share of this machine's free memory the check may take
MEMORY_SHARE = 0.5
_SEED = 0


@dataclass(frozen=True)
class Estimate:
    """What the check costs at a batch: bytes (``fixed`` for the parameters, their
    gradients and the module's copy, ``per_sample`` for activations) and FLOPs."""

    fixed: float
    per_sample: float
    flops_per_sample: float

    @classmethod
    def of(cls, graph: OpGraph) -> Estimate:
        batch = graph.batch_size
        params = sum(p.numel for p in graph.parameters.values())
        activations = sum(math.prod(t.shape) for op in graph.ops for t in op.outputs)
        forward, backward = graph.total_flops()
        # float64: each side's parameters and gradients, the module's copy; each side's
        # activations kept for backward and their gradients
        return cls(8.0 * 5 * params, 8.0 * 4 * activations / batch,
                   2 * (forward + backward) / batch)

    def fits(self, batch: int) -> bool:
        return (self.fixed + self.per_sample * batch <= free_memory() * MEMORY_SHARE
                and self.flops_per_sample * batch <= CHECK_FLOPS)

    def largest_batch(self, below: int) -> int:
        """The largest batch under ``below`` the check fits at, 0 when none."""
        return next((b for b in range(below - 1, 0, -1) if self.fits(b)), 0)

    def describe(self, batch: int) -> str:
        return (f"{(self.fixed + self.per_sample * batch) / 2**30:.1f} GiB and "
                f"{self.flops_per_sample * batch / 1e9:.0f} GFLOPs at batch {batch}, more than "
                f"the {free_memory() * MEMORY_SHARE / 2**30:.1f} GiB and "
                f"{CHECK_FLOPS / 1e9:.0f} GFLOPs it may take here")


@dataclass(frozen=True)
class Verdict:
    """Whether the check ran (the graph then computes what the module does: a graph
    that does not is refused, never given a verdict); when it did not, why, and the
    largest smaller batch it would fit at (0: none, or it is not a matter of size)."""

    checked: bool
    why: str = ""
    smaller: int = 0


def free_memory() -> float:
    """Bytes of memory this machine has available."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def check_import(graph: OpGraph, module: torch.nn.Module, inputs: tuple[Any, ...],
                 values: dict[Node, Any], program: ExportedProgram) -> Verdict:
    """Compare ``graph`` with ``module`` on ``inputs`` (``values``: what each node of the
    exported ``program`` became in the graph); GraphError when they differ."""
    estimate, batch = Estimate.of(graph), graph.batch_size
    if not estimate.fits(batch):
        return Verdict(False, f"it needs {estimate.describe(batch)}",
                       estimate.largest_batch(batch))
    try:
        module64 = copy.deepcopy(module).to(torch.float64)
    except Exception as exc:  # noqa: BLE001 (a module holding what cannot be copied)
        return Verdict(False, f"the module cannot be copied to float64 "
                              f"({type(exc).__name__}: {str(exc)[:100]})")
    call = ModuleCall.of(graph)
    args = tuple(x.to(torch.float64) if x.is_floating_point() else x for x in inputs)
    data = dict(zip(call.inputs, args))
    labels = _labels(graph, call)
    if labels is not None and call.labels is not None:
        data[call.labels] = labels
    names: dict[str, str] = graph.meta["module_params"]
    own = dict(module64.named_parameters(remove_duplicate=False))
    params = {g: own[names[g]].detach().clone().requires_grad_() for g in graph.parameters}
    outputs: dict[int, list[torch.Tensor]] = {}
    try:
        graph_loss = run_whole(graph, params, lambda op: _data(op, data), _SEED,
                               outputs=outputs)
        graph_loss.backward()
    except Exception as exc:  # noqa: BLE001 (an opaque op's nodes tied to float32)
        return Verdict(False, f"the graph does not run in float64 here: "
                              f"{type(exc).__name__}: {str(exc)[:160]}")
    try:
        with flextui_terms(graph, _SEED):
            loss = module_loss(call, module64(*args), labels)
        loss.backward()
    except Exception as exc:  # noqa: BLE001 (the user's code, tied to float32, say; or
        # dropout the graph runs in an opaque op: flextui_terms' GraphError)
        return Verdict(False, f"the module does not run in float64 as the graph does: "
                              f"{type(exc).__name__}: {str(exc)[:160]}")
    found, expected = float(graph_loss.detach()), float(loss.detach())
    error = abs(found - expected) / max(abs(expected), 1e-300)
    where = (f"in float64 on its example inputs the graph's loss is {found:.10g} and the "
             f"module's {expected:.10g} ({error:.1e} relative)")
    if error > TOLERANCE:
        with torch.no_grad():
            first = _first_difference(graph, outputs, values, program, args)
        raise _refusal(graph, where, first)
    worst = _gradients(graph, params, own, names)
    if worst is not None:
        raise _refusal(graph, f"the losses agree, but {worst}", "")
    return Verdict(True)


def _refusal(graph: OpGraph, what: str, first: str) -> GraphError:
    return GraphError(f"model {graph.name!r}: the import changes what the model computes: "
                      f"{what}, more than {TOLERANCE:.0e}{first}. flextui does not train a "
                      "model other than yours; this is a flextui bug, please report it with "
                      "the model")


def _labels(graph: OpGraph, call: ModuleCall) -> torch.Tensor | None:
    """Labels for the cross-entropy flextui adds: below the logits' class count."""
    if call.labels is None:
        return None
    op = next(op for op in graph.ops if op.name == call.labels)
    loss = next(c for c in graph.ops if op.outputs[0] in c.inputs)
    classes = loss.inputs[0].shape[-1]
    gen = torch.Generator().manual_seed(_SEED)
    return torch.randint(0, classes, op.outputs[0].shape, generator=gen)


def _data(op: Op, data: dict[str, torch.Tensor]) -> torch.Tensor:
    if op.attrs.get("fill") == InputFill.POSITIONS:
        rows, length = op.outputs[0].shape
        return torch.arange(length).expand(rows, -1)
    return data[op.name]


def _gradients(graph: OpGraph, params: dict[str, torch.Tensor],
               own: dict[str, torch.nn.Parameter], names: dict[str, str]) -> str | None:
    """What differs first among the gradients of the module's parameters (a tied one's
    is the sum over the graph's parameters it is), None when none does. A gradient that
    is nothing but rounding (a bias before a batch norm) is measured against the
    largest gradient of all."""
    summed: dict[int, torch.Tensor] = {}
    for g, param in params.items():
        grad = param.grad if param.grad is not None else torch.zeros_like(param)
        key = id(own[names[g]])
        summed[key] = summed[key] + grad if key in summed else grad
    grads = {name: p.grad if p.grad is not None else torch.zeros_like(p)
             for name, p in own.items()}
    scale = max((float(g.abs().max()) for g in grads.values() if g.numel()), default=0.0)
    for name, param in own.items():
        expected, found = grads[name], summed.get(id(param))
        if found is None:
            if float(expected.abs().max()) > scale * 1e-6:
                return (f"the module's parameter {name} has a gradient, and no op of the "
                        "graph uses it")
            continue
        error = relative_error(found, expected, scale)
        if error > TOLERANCE:
            return f"the gradient of the module's parameter {name} differs by {error:.1e} relative"
    return None


def _first_difference(graph: OpGraph, outputs: dict[int, list[torch.Tensor]],
                      values: dict[Node, Any], program: ExportedProgram,
                      args: tuple[Any, ...]) -> str:
    """'; the first op that differs is ...': the graph's first op whose output differs
    from the value of the exported node it was made from, run in float64 (a dropout
    node takes the graph's value: both draw flextui's mask)."""
    made: dict[Tensor, Node] = {}
    for node, value in values.items():
        if isinstance(value, Tensor):
            made.setdefault(value, node)
    known = {k: v.to(torch.float64) if v.is_floating_point() else v
             for k, v in program_of(program).known.items()}
    users = iter(args)
    env: dict[str, Any] = {}
    try:
        for node in program.graph.nodes:
            if node.op == "placeholder":
                env[node.name] = known[node.name] if node.name in known else next(users)
            elif node.op == "call_function":
                value = values.get(node)
                if target_name(node.target) == "aten.dropout.default" and \
                        isinstance(value, Tensor) and value.producer is not None:
                    env[node.name] = outputs[value.producer.index][value.index]
                    continue
                node_args = torch.fx.node.map_arg(node.args, lambda n: env[n.name])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n.name])
                env[node.name] = node.target(*node_args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (a node tied to float32 fails any way)
        return f" (the exported program does not run in float64 to find where: {exc!s:.100})"
    for op in graph.ops:
        for out, found in zip(op.outputs, outputs[op.index]):
            origin = made.get(out)
            expected = env.get(origin.name) if origin is not None else None
            if origin is None or not isinstance(expected, torch.Tensor) or \
                    expected.shape != found.shape:
                continue
            error = relative_error(found.detach(), expected.to(found.dtype))
            if error > TOLERANCE:
                at = source_line(origin)
                return (f"; the first op that differs is {op.name!r} ({op.type})"
                        f"{f' at {at}' if at else ''} ({error:.1e} relative)")
    return "; no op's output differs from the exported program's: the loss does"
