"""The user's module run on the terms its imported graph runs on, so that the two can be
compared: how the module is called and its loss taken (``ModuleCall``, recorded in the
graph's meta at import), and, while it runs, the two things whose results depend on
flextui rather than on the model (``flextui_terms``): dropout's masks, which flextui
draws from each element's position (so that any split of an op draws the same ones),
and batch statistics, which a run computes per sample block of its strategy (as data
parallelism without synchronised batch norm does); and a float64 run stays in float64
(``KeepFloat64``: the graph runs in one dtype, where transformers casts some steps to
float32). Everything else is the module's own forward, run by plain PyTorch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from flextui.errors import GraphError
from flextui.graph.graph import OpGraph
from flextui.graph.importer.float64 import KeepFloat64
from flextui.graph.kernels.basic import dropout as graph_dropout
from flextui.graph.op import Op
from flextui.graph.region import Region, full_region

META_KEY = "module_call"


@dataclass(frozen=True)
class ModuleCall:
    """How the module of an imported graph is called: the graph's input ops holding its
    forward's arguments, in order; which leaf of its output (in torch's pytree order,
    the exported program's) is its result; and the input op holding the labels of the
    cross-entropy flextui adds to a module that returns logits (None when the module
    returns its own loss)."""

    inputs: tuple[str, ...]
    output: int
    labels: str | None

    def to_meta(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "output": self.output, "labels": self.labels}

    @classmethod
    def of(cls, graph: OpGraph) -> ModuleCall:
        """The call recorded in ``graph``'s meta, checked against the graph (its meta
        may come from a file): GraphError unless it names the graph's input ops."""
        data = graph.meta.get(META_KEY)
        inputs = {op.name for op in graph.ops if op.type == "input"}
        names = data.get("inputs") if isinstance(data, dict) else None
        output = data.get("output") if isinstance(data, dict) else None
        labels = data.get("labels") if isinstance(data, dict) else None
        if not (isinstance(data, dict) and set(data) == {"inputs", "output", "labels"}
                and isinstance(names, list) and all(n in inputs for n in names)
                and type(output) is int and output >= 0
                and (labels is None or labels in inputs)):
            raise GraphError(f"graph {graph.name!r} does not say how its module is called "
                             f"(meta {META_KEY} is {data!r:.120}); import the model again")
        return cls(tuple(names), output, labels)


def module_loss(call: ModuleCall, output: Any, labels: torch.Tensor | None) -> torch.Tensor:
    """The module's loss from what its forward returned: its result, or the mean
    cross-entropy of its logits and ``labels`` (the loss flextui adds)."""
    leaves = pytree.tree_leaves(output)
    result = leaves[call.output] if call.output < len(leaves) else None
    if not isinstance(result, torch.Tensor):
        raise GraphError(f"the module returned {len(leaves)} values; its result was value "
                         f"{call.output}, a tensor, when it was imported")
    if call.labels is None:
        return result
    assert labels is not None
    return F.cross_entropy(result, labels)


@contextlib.contextmanager
def flextui_terms(graph: OpGraph, seed: int,
                  blocks: Callable[[Op], list[Region]] | None = None) -> Iterator[None]:
    """While the module runs here, its k-th training-mode dropout draws the mask of the
    graph's k-th dropout op (with ``seed``, the kernels' seed), and with ``blocks`` its
    k-th training-mode batch norm normalises each sample block of the graph's k-th
    batchnorm op on its own; casts of float64 tensors to float32 are left out
    (``KeepFloat64``). GraphError when the module's calls do not match the graph's
    ops."""
    dropouts = iter([op for op in graph.ops
                     if op.type == "unary" and op.attrs.get("fn") == "dropout"])
    norms = iter([op for op in graph.ops if op.type == "batchnorm"])
    real_dropout, real_norm = F.dropout, F.batch_norm
    # F.batch_norm hands itself, by its global name (this function while it runs), to a
    # torch function mode (KeepFloat64): a block's call coming back is the real one
    norming = False

    def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,
                inplace: bool = False) -> torch.Tensor:
        if not training or not p:
            return real_dropout(input, p, training, inplace)
        op = _matching(next(dropouts, None), input, "dropout", graph)
        if float(op.attrs.get("p", 0.5)) != float(p):
            raise GraphError(f"the module's dropout of p={p} is op {op.name!r} of "
                             f"p={op.attrs.get('p')} in the graph")
        out = graph_dropout(input, op, full_region(op.space_shape), seed)
        return input.copy_(out) if inplace else out

    def batch_norm(input: torch.Tensor, running_mean: Any, running_var: Any,
                   weight: Any = None, bias: Any = None, training: bool = False,
                   momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
        nonlocal norming
        if norming or not (training and blocks is not None):
            return real_norm(input, running_mean, running_var, weight, bias, training,
                             momentum, eps)
        op = _matching(next(norms, None), input, "batch norm", graph)
        norming = True
        try:
            return torch.cat([real_norm(input[start:stop], running_mean, running_var,
                                        weight, bias, training, momentum, eps)
                              for (start, stop), *_ in blocks(op)], dim=0)
        finally:
            norming = False

    F.dropout, F.batch_norm = dropout, batch_norm
    try:
        with KeepFloat64():
            yield
    finally:
        F.dropout, F.batch_norm = real_dropout, real_norm


def _matching(op: Op | None, input: torch.Tensor, what: str, graph: OpGraph) -> Op:
    """The graph's op for the module's next call of ``what`` on ``input``."""
    if op is None or op.outputs[0].shape != tuple(input.shape):
        raise GraphError(f"the module's {what} on a {list(input.shape)} tensor has no op of "
                         f"that shape next in graph {graph.name!r} "
                         f"({'none left' if op is None else repr(op.name)}): the graph does "
                         "not run as the module does")
    return op
