"""A graph as it computes in another dtype: the simulator times a strategy that computes
in bf16 (``strategy.precision``) on this view, so its ops run at the dtype's peak and
its activations are kept and moved at the dtype's width, by the same code as any
graph's."""

from __future__ import annotations

from dataclasses import replace
from weakref import WeakKeyDictionary

from flextui.graph.graph import OpGraph
from flextui.graph.tensor import Parameter, Tensor


def in_dtype(graph: OpGraph, dtype: str) -> OpGraph:
    """``graph`` with its tensors and parameters of the graph's dtype in ``dtype`` (an
    integer input stays as it is): the same ops, names, attributes and splits, in the
    same order; ``graph`` itself when it is in ``dtype`` already. Made once per graph
    and dtype and kept as long as the graph: cost models memoise an op's cost by the
    op's identity, which a view made anew (after one freed) could reuse."""
    if dtype == graph.dtype:
        return graph
    views = _VIEWS.get(graph)
    if views is None:
        views = _VIEWS[graph] = {}
    view = views.get(dtype)
    if view is None:
        view = views[dtype] = _view(graph, dtype)
    return view


#: each graph's views, by dtype (the views live as long as their graph)
_VIEWS: WeakKeyDictionary[OpGraph, dict[str, OpGraph]] = WeakKeyDictionary()


def _view(graph: OpGraph, dtype: str) -> OpGraph:
    tensors: dict[int, Tensor] = {}     # id of the graph's tensor -> the view's
    params: dict[str, Parameter] = {}
    ops = []
    for op in graph.ops:
        view = replace(op, inputs=tuple(tensors[id(t)] for t in op.inputs),
                       params=tuple(params.setdefault(
                           p.name, Parameter(p.name, p.shape, _cast(p.dtype, graph, dtype)))
                           for p in op.params))
        view.outputs = tuple(Tensor(t.name, t.shape, _cast(t.dtype, graph, dtype), view,
                                    t.index) for t in op.outputs)
        tensors.update({id(t): v for t, v in zip(op.outputs, view.outputs)})
        ops.append(view)
    return OpGraph(graph.name, ops, dict(graph.meta), dtype, graph.source)


def _cast(dtype: str, graph: OpGraph, to: str) -> str:
    return to if dtype == graph.dtype else dtype
