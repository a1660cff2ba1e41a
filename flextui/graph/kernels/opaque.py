"""The opaque op's kernel: the module's own exported nodes, run on the block's rows.

An opaque op's attributes name the nodes it runs, never where they come from. The
nodes are the program of the user's module exported at the op's batch
(``RegionProgram``), given to each opaque op in the process that runs it
(``bind_program``): the importer gives the program it made the op from; a rank
exports the module the launch plan carries and gives it (``runtime.regions``). An op
with no program given is an error, never a lookup of code by name.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from flextui.errors import GraphError
from flextui.graph.kernels.base import Kernel, register
from flextui.graph.tensor import FLOAT_DTYPES

if TYPE_CHECKING:
    from flextui.graph.op import Op


@dataclass(frozen=True)
class RegionProgram:
    """A module's exported program, as opaque ops run parts of it: its nodes by name,
    and the values of its parameters, buffers and constants by placeholder."""

    nodes: Mapping[str, Any]
    known: Mapping[str, torch.Tensor]

    def missing(self, op: Op) -> list[str]:
        """The nodes ``op`` names that this program does not have."""
        attrs = op.attrs
        named = [*attrs["nodes"], *attrs["inputs"], *attrs["params"], *attrs["constants"],
                 *(name for name, _, _ in attrs["outputs"])]
        return [n for n in named if n not in self.nodes]


_PROGRAMS: weakref.WeakKeyDictionary[Op, RegionProgram] = weakref.WeakKeyDictionary()


def bind_program(op: Op, program: RegionProgram) -> None:
    """Give opaque op ``op`` the program it runs (GraphError if it names nodes the
    program lacks: the module is not the one the graph was imported from)."""
    missing = program.missing(op)
    if missing:
        raise GraphError(f"opaque op {op.name!r}: the module has no node "
                         f"{', '.join(missing)[:200]}; it is not the module the graph was "
                         "imported from (search and launch from the same model)")
    _PROGRAMS[op] = program


@dataclass(frozen=True)
class Placement:
    """Where a region runs when not as exported: on ``device``, its ``exported`` float
    dtype (float32) computed in ``dtype`` (a float64 check). A node that makes a tensor
    names the dtype and device it was exported with (``zeros(..., dtype=torch.float32,
    device=cpu)``, an LSTM's first state); they become these."""

    exported: torch.dtype
    dtype: torch.dtype
    device: torch.device

    def __call__(self, value: Any) -> Any:
        if isinstance(value, torch.dtype):
            return self.dtype if value == self.exported else value
        if isinstance(value, torch.device):
            return self.device
        return value


def run_nodes(nodes: list[Any], env: dict[str, Any], outputs: list[str],
              placement: Placement | None = None) -> list[Any]:
    """Run exported-graph ``nodes`` in order from ``env`` (placeholder name -> value),
    at ``placement`` (None: as exported); the values of ``outputs``."""
    env = dict(env)
    place = placement or (lambda value: value)

    def value(arg: Any) -> Any:
        return env[arg.name] if isinstance(arg, torch.fx.Node) else place(arg)

    for node in nodes:
        args = torch.fx.node.map_aggregate(node.args, value)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, value)
        env[node.name] = node.target(*args, **kwargs)
    return [env[name] for name in outputs]


@register
class OpaqueKernel(Kernel):
    name = "opaque"

    def forward(self, op, region, inputs, params, seed):
        program = _PROGRAMS.get(op)
        if program is None:
            raise GraphError(f"opaque op {op.name!r} has no program to run: an opaque op "
                             "runs the user's module, which only a model the user gave "
                             "provides (a graph read from a file has none)")
        attrs, known = op.attrs, program.known
        like = next((t for t in (*inputs, *params) if t.is_floating_point()), None)
        env = {name: known[name] if like is None else
               known[name].to(like.device, like.dtype if known[name].is_floating_point()
                              else known[name].dtype)
               for name in attrs["constants"]}
        env.update(zip(attrs["inputs"], inputs))
        env.update(zip(attrs["params"], params))
        placement = None if like is None else Placement(_exported_float(op), like.dtype,
                                                        like.device)
        return run_nodes([program.nodes[name] for name in attrs["nodes"]], env,
                         [name for name, _, _ in attrs["outputs"]], placement)


def _exported_float(op: Op) -> torch.dtype:
    """The float dtype the op's region was exported with: its first float input's or
    parameter's (the one the block's ``like`` tensor stands for)."""
    dtypes = [t.dtype for t in op.inputs] + [p.dtype for p in op.params]
    name = next(d for d in dtypes if d in FLOAT_DTYPES)
    return getattr(torch, str(name))
