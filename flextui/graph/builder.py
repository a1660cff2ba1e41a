"""A framework-style API for building operator graphs.

    g = GraphBuilder("alexnet", batch_size=256, family="cnn")
    x = g.input((256, 3, 224, 224))
    x = g.relu(g.conv2d(x, 64, kernel=11, stride=4, padding=2))
    ...
    graph = g.build()

Each call adds one op, infers its output shapes, checks its inputs, and returns its
output tensor(s). Ops that pass the same ``shared`` key share their parameters (the
unrolled steps of an LSTM layer); the key also names the op's layer.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

from flextui.errors import GraphError
from flextui.fields import control_problem
from flextui.graph.graph import OpGraph
from flextui.graph.op import Op
from flextui.graph.tensor import DTYPE_BYTES, Parameter, Tensor
from flextui.limits import DIM_SIZE, MAX_INTEGER, NAME_CHARS

IntOrPair = int | tuple[int, int]


class GraphBuilder:
    def __init__(self, name: str, dtype: str = "float32", **meta: Any) -> None:
        _check_name(name, "a graph's name")
        if dtype not in DTYPE_BYTES:
            raise GraphError(f"graph {name!r}: unknown dtype {dtype!r:.40}; use one of "
                             f"{', '.join(DTYPE_BYTES)}")
        _check_meta(name, meta)
        self.name = name
        self.dtype = dtype
        self.meta = meta
        self._ops: list[Op] = []
        self._names: set[str] = set()
        self._params: dict[str, tuple[Parameter, str | None]] = {}  # name -> (param, key)
        self._scope: list[str] = []
        self._counts: dict[str, int] = {}

    # -- bookkeeping ---------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self, prefix: str) -> Iterator[None]:
        """Prefix the names of the ops added inside with ``prefix.``."""
        self._scope.append(prefix)
        try:
            yield
        finally:
            self._scope.pop()

    def _name(self, given: str | None, type_: str) -> str:
        if given is None:
            self._counts[type_] = self._counts.get(type_, 0) + 1
            given = f"{type_}_{self._counts[type_]}"
        name = ".".join([*self._scope, given])
        _check_name(name, f"graph {self.name!r}: an op's name")
        if name in self._names:
            raise GraphError(f"graph {self.name!r}: op name {name!r} is used twice")
        self._names.add(name)
        return name

    def has_op(self, name: str) -> bool:
        """Whether an op of the graph is named ``name`` already."""
        return name in self._names

    def add(self, type_: str, inputs: Sequence[Tensor], attrs: dict[str, Any],
            name: str | None = None, shared: str | None = None, layer: str | None = None) -> Op:
        """Add an op of type ``type_``; the typed methods below all come through here.
        ``layer`` defaults to the ``shared`` key, else the current scope."""
        for t in inputs:
            if not isinstance(t, Tensor):
                raise GraphError(f"graph {self.name!r}: {type_} got {t!r:.60} where a tensor "
                                 "belongs")
        for key, what in ((shared, "shared key"), (layer, "layer")):
            if key is not None:
                _check_name(key, f"graph {self.name!r}: an op's {what}")
        op = Op(name=self._name(name, type_), type=type_, attrs=attrs, inputs=tuple(inputs),
                index=len(self._ops), shared=shared,
                layer=layer if layer is not None else shared or ".".join(self._scope))
        kind = op.kind
        try:   # attributes of the wrong type (a hand-edited search log) fail in here
            kind.check(op)
            op.outputs = tuple(Tensor(f"{op.name}:{i}", tuple(shape), dtype, op, i)
                               for i, (shape, dtype) in enumerate(kind.infer(op)))
            for t in op.outputs:
                _check_shape(op, "output", t.shape)
            op.space = kind.space(op)
            op.param_specs = tuple(kind.params(op))
            for spec in op.param_specs:
                _check_shape(op, f"{spec.role} parameter", spec.shape)
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError,
                OverflowError) as exc:
            raise GraphError(f"op {op.name!r} ({type_}): its attributes do not fit "
                             f"({type(exc).__name__}: {str(exc)[:120]})") from None
        op.params = tuple(self._parameter(op, spec.role, spec.shape, shared)
                          for spec in op.param_specs)
        self._ops.append(op)
        return op

    def _parameter(self, op: Op, role: str, shape: tuple[int, ...],
                   shared: str | None) -> Parameter:
        """The op's own parameter, or the one shared under key ``shared`` (made by the
        first op that uses the key)."""
        name = f"{shared or op.name}.{role}"
        if name not in self._params:
            self._params[name] = (Parameter(name, shape, self.dtype), shared)
        param, owner = self._params[name]
        if owner != shared:
            raise GraphError(f"op {op.name!r}: parameter name {name!r} is already used by "
                             f"another op; rename the op or the shared key")
        if param.shape != shape:
            raise GraphError(f"op {op.name!r} shares {shared!r} but its {role} has shape "
                             f"{shape}, not {param.shape}")
        return param

    def _one(self, *args: Any, **kwargs: Any) -> Tensor:
        return self.add(*args, **kwargs).outputs[0]

    def build(self) -> OpGraph:
        if not self._ops:
            raise GraphError(f"graph {self.name!r} has no ops")
        return OpGraph(self.name, list(self._ops), dict(self.meta), self.dtype)

    # -- op constructors -----------------------------------------------------------

    def input(self, shape: Sequence[int], dtype: str | None = None,
              name: str | None = None) -> Tensor:
        return self._one("input", [], {"shape": list(shape), "dtype": dtype or self.dtype}, name)

    def conv2d(self, x: Tensor, out_channels: int, kernel: IntOrPair, stride: IntOrPair = 1,
               padding: IntOrPair = 0, dilation: IntOrPair = 1, bias: bool = True,
               name: str | None = None, shared: str | None = None) -> Tensor:
        attrs = {"out_channels": out_channels, "kernel": _attr(kernel), "stride": _attr(stride),
                 "padding": _attr(padding), "dilation": _attr(dilation), "bias": bias}
        return self._one("conv2d", [x], attrs, name, shared)

    def pool2d(self, x: Tensor, kernel: IntOrPair, stride: IntOrPair | None = None,
               padding: IntOrPair = 0, mode: str = "max", name: str | None = None) -> Tensor:
        attrs = {"mode": mode, "kernel": _attr(kernel),
                 "stride": _attr(kernel if stride is None else stride), "padding": _attr(padding)}
        return self._one("pool2d", [x], attrs, name)

    def adaptive_pool2d(self, x: Tensor, output_size: IntOrPair, mode: str = "avg",
                        name: str | None = None) -> Tensor:
        """Adaptive pooling to ``output_size``; 1 gives global pooling."""
        return self._one("pool2d", [x], {"mode": mode, "output_size": _attr(output_size)}, name)

    def batchnorm(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("batchnorm", [x], {}, name)

    def unary(self, x: Tensor, fn: str, name: str | None = None) -> Tensor:
        return self._one("unary", [x], {"fn": fn}, name)

    def relu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary(x, "relu", name)

    def gelu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary(x, "gelu", name)

    def dropout(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary(x, "dropout", name)

    def binary(self, a: Tensor, b: Tensor, fn: str, name: str | None = None) -> Tensor:
        return self._one("binary", [a, b], {"fn": fn}, name)

    def add_(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        return self.binary(a, b, "add", name)

    def concat(self, xs: Sequence[Tensor], axis: int, name: str | None = None) -> Tensor:
        return self._one("concat", xs, {"axis": axis, "stack": False}, name)

    def stack(self, xs: Sequence[Tensor], axis: int, name: str | None = None) -> Tensor:
        """Concatenate along a new axis (a concat op with ``stack``)."""
        return self._one("concat", xs, {"axis": axis, "stack": True}, name)

    def split(self, x: Tensor, sizes: Sequence[int], axis: int,
              name: str | None = None) -> list[Tensor]:
        return list(self.add("split", [x], {"axis": axis, "sizes": list(sizes)}, name).outputs)

    def reshape(self, x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
        shape = list(shape)
        if shape.count(-1) == 1:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = math.prod(x.shape) // max(known, 1)
        return self._one("reshape", [x], {"shape": shape}, name)

    def flatten(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.reshape(x, [x.shape[0], -1], name)

    def linear(self, x: Tensor, out_features: int, bias: bool = True, name: str | None = None,
               shared: str | None = None, *, transposed: bool = False,
               rows: tuple[int, int] | None = None) -> Tensor:
        """A linear layer; ``transposed``: its weight is [in, out]; ``rows`` = (first,
        total): it uses ``out_features`` rows of a weight of ``total`` from ``first``."""
        attrs: dict[str, Any] = {"out_features": out_features, "bias": bias}
        if transposed:
            attrs["transposed"] = True
        if rows is not None:
            attrs["rows"] = list(rows)
        return self._one("linear", [x], attrs, name, shared)

    def embedding(self, ids: Tensor, num_embeddings: int, dim: int, name: str | None = None,
                  shared: str | None = None, padding_idx: int | None = None) -> Tensor:
        """A table lookup; the row ``padding_idx`` gets no gradient (torch's)."""
        attrs: dict[str, Any] = {"num_embeddings": num_embeddings, "dim": dim}
        if padding_idx is not None:
            attrs["padding_idx"] = padding_idx
        return self._one("embedding", [ids], attrs, name, shared)

    def lstm_cell(self, x: Tensor, state: tuple[Tensor, Tensor] | None, hidden: int,
                  name: str | None = None, shared: str | None = None) -> tuple[Tensor, Tensor]:
        """One LSTM step; ``state`` is the previous (h, c), None at the first step."""
        inputs = [x] if state is None else [x, *state]
        h, c = self.add("lstm_cell", inputs, {"hidden": hidden}, name, shared).outputs
        return h, c

    def attention(self, query: Tensor, keys: Tensor, name: str | None = None,
                  shared: str | None = None) -> Tensor:
        """Additive (Bahdanau) attention of one decoder step over encoder states."""
        return self._one("attention", [query, keys], {}, name, shared)

    def multihead_attention(self, q: Tensor, k: Tensor, v: Tensor, heads: int,
                            causal: bool = True, name: str | None = None) -> Tensor:
        return self._one("multihead_attention", [q, k, v], {"heads": heads, "causal": causal}, name)

    def layernorm(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._one("layernorm", [x], {}, name)

    def matmul(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        return self._one("matmul", [a, b], {}, name)

    def softmax_ce(self, logits: Tensor, labels: Tensor, name: str | None = None, *,
                   class_dim: int = -1) -> Tensor:
        """Classes along the last dim of ``logits``, or ``class_dim=1`` (torch's
        convention for ``[B, C, d1, ...]``: a per-pixel loss)."""
        attrs = {"class_dim": 1} if class_dim == 1 and len(logits.shape) > 2 else {}
        return self._one("softmax_ce", [logits, labels], attrs, name)


def _check_name(name: object, what: str) -> None:
    """Refuse a name that is not a string, is longer than flextui's limit or holds a
    control character (a terminal escape in an op's name from a search log)."""
    if not isinstance(name, str):
        raise GraphError(f"{what} must be a string, found {name!r:.60}")
    problem = NAME_CHARS.problem(len(name)) or control_problem(name)
    if problem is not None:
        raise GraphError(f"{what} {name[:40]!r}: {problem}")


def _check_shape(op: Op, what: str, shape: tuple) -> None:
    """Every dim a whole number from 1 to flextui's limit."""
    if not all(type(size) is int for size in shape):
        raise GraphError(f"op {op.name!r} ({op.type}): {what} shape {shape!r:.80} is not "
                         "whole numbers")
    if any(size <= 0 for size in shape):
        raise GraphError(f"op {op.name!r} ({op.type}): {what} shape {shape!r:.80} is empty")
    for size in shape:
        problem = DIM_SIZE.problem(size)
        if problem is not None:
            raise GraphError(f"op {op.name!r} ({op.type}): {what} shape: {problem}")


def _check_meta(graph: str, meta: dict[str, Any]) -> None:
    """What the library and the summaries read from a graph's meta: its family and model
    names, batch size and options."""
    for key in ("family", "model"):
        if key in meta:
            _check_name(meta[key], f"graph {graph!r}: meta {key}")
    batch = meta.get("batch_size", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_INTEGER:
        raise GraphError(f"graph {graph!r}: meta batch_size must be a positive whole number, "
                         f"found {batch!r:.40}")
    options = meta.get("options", {})
    if not isinstance(options, dict):
        raise GraphError(f"graph {graph!r}: meta options must be a mapping")
    for key, value in options.items():
        _check_name(key, f"graph {graph!r}: a model option's name")
        problem = control_problem(value) if isinstance(value, str) else None
        if problem is not None:
            raise GraphError(f"graph {graph!r}: model option {key!r}: {value[:40]!r} "
                             f"{problem}")


def _attr(value: IntOrPair) -> int | list[int]:
    return value if isinstance(value, int) else list(value)


def graph_from_dict(data: dict[str, Any]) -> OpGraph:
    """Rebuild a graph from ``OpGraph.to_dict()`` output, re-checking every op."""
    try:
        g = GraphBuilder(data["name"], data.get("dtype", "float32"), **data.get("meta", {}))
        tensors: dict[str, Tensor] = {}
        for spec in data["ops"]:
            inputs = [tensors[name] for name in spec["inputs"]]
            op = g.add(spec["type"], inputs, dict(spec["attrs"]), spec["name"],
                       spec.get("shared"), spec["layer"])
            tensors.update({t.name: t for t in op.outputs})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GraphError(f"graph data is malformed: {exc!r:.200}") from None
    return g.build()
