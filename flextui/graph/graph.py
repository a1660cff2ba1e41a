"""The operator graph: a DAG of ops in topological order."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from flextui.errors import GraphError
from flextui.graph.op import Op
from flextui.graph.tensor import Parameter, Tensor

if TYPE_CHECKING:
    import networkx as nx

    from flextui.graph.model_source import ModelSource


@dataclass(eq=False)
class OpGraph:
    """Ops in topological order (a producer always precedes its consumers).

    ``meta`` carries what the model library knows about the graph: its family
    (``cnn``, ``rnn``, ``transformer``, ``recommendation``, ``mlp``), the batch size and
    the options it was built with.

    ``source`` is the model the user gave that the library built this graph from, in
    this process; it is never part of the graph's data (``to_dict``, the fingerprint),
    so a graph read from a file has none.
    """

    name: str
    ops: list[Op]
    meta: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"  # of the parameters the builder made
    source: ModelSource | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {op.name: op for op in self.ops}

    def op(self, name: str) -> Op:
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no op named {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def batch_size(self) -> int:
        return self.meta.get("batch_size", self.ops[0].outputs[0].shape[0])

    @property
    def family(self) -> str:
        return self.meta.get("family", "")

    @property
    def imported(self) -> bool:
        """Imported from a PyTorch module: running it needs the module (its weights,
        and what its opaque ops run), so a model source."""
        return "module_params" in self.meta or any(op.type == "opaque" for op in self.ops)

    @cached_property
    def parameters(self) -> dict[str, Parameter]:
        """Every distinct parameter, by name (a shared parameter appears once)."""
        return {p.name: p for op in self.ops for p in op.params}

    @cached_property
    def shared_parameters(self) -> frozenset[str]:
        """The parameters more than one op uses (a tied embedding, an unrolled RNN's)."""
        seen: set[str] = set()
        shared: set[str] = set()
        for op in self.ops:
            for name in dict.fromkeys(p.name for p in op.params):
                (shared if name in seen else seen).add(name)
        return frozenset(shared)

    @cached_property
    def neighbour_indices(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        """The indices of each op's predecessors and of its successors, by op index."""
        return ([tuple(p.index for p in self.predecessors(op)) for op in self.ops],
                [tuple(c.index for c in self.successors(op)) for op in self.ops])

    @property
    def param_count(self) -> int:
        return sum(p.numel for p in self.parameters.values())

    @cached_property
    def consumers(self) -> dict[Tensor, list[Op]]:
        users: dict[Tensor, list[Op]] = {t: [] for op in self.ops for t in op.outputs}
        for op in self.ops:
            for t in op.inputs:
                users[t].append(op)
        return users

    def predecessors(self, op: Op) -> list[Op]:
        return list(dict.fromkeys(_producer(t) for t in op.inputs))

    def successors(self, op: Op) -> list[Op]:
        return list(dict.fromkeys(c for t in op.outputs for c in self.consumers[t]))

    def to_networkx(self) -> nx.DiGraph:
        """The op-level DAG (nodes are op names, edges carry the tensor)."""
        import networkx as nx  # only here: start-up (flextui --help) imports the graph package

        g: nx.DiGraph[str] = nx.DiGraph()
        for op in self.ops:
            g.add_node(op.name, type=op.type)
            for t in op.inputs:
                g.add_edge(_producer(t).name, op.name, tensor=t.name)
        return g

    def total_flops(self) -> tuple[float, float]:
        """Forward and backward FLOPs of one iteration (whole ops, no partitioning)."""
        fwd = bwd = 0.0
        for op in self.ops:
            f, b = op.flops(tuple((0, s) for s in op.space_shape))
            fwd, bwd = fwd + f, bwd + b
        return fwd, bwd

    def to_dict(self) -> dict[str, Any]:
        """The graph as plain data (for search logs); ``graph_from_dict`` rebuilds it."""
        ops = [{"name": op.name, "type": op.type, "attrs": op.attrs, "layer": op.layer,
                "inputs": [t.name for t in op.inputs], "shared": op.shared}
               for op in self.ops]
        return {"name": self.name, "dtype": self.dtype, "meta": self.meta, "ops": ops}

    @cached_property
    def fingerprint(self) -> str:
        """A stable hash of the graph's structure, shapes, attributes and parameters."""
        data = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(data.encode()).hexdigest()[:16]


def _producer(t: Tensor) -> Op:
    """The op ``t`` is an output of: every tensor of a graph has one (GraphBuilder sets it)."""
    assert t.producer is not None
    return t.producer
