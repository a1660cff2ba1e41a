"""What the ATen handlers share: the values a call's arguments can be besides flextui
tensors (``ParamRef``; ``constants.Constant``), ``Unmappable``, and the ``Context`` an op is built
in (the builder, the op's name, and which module parameter each graph parameter is)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flextui.graph.builder import GraphBuilder
from flextui.graph.tensor import Tensor

if TYPE_CHECKING:
    from torch.fx import Node


class Unmappable(Exception):
    """This call of a mapped op cannot be partitioned (a variant not supported yet)."""


@dataclass(frozen=True)
class ParamRef:
    """One of the module's parameters, as a call's argument (its name and shape)."""

    name: str
    shape: tuple[int, ...]


class Context:
    """The builder; the name the op being mapped gets: the path of the torch.nn layer
    that ran it ("layer1.0.conv1"), else the path of the user's block and the node's
    name ("layer1.0.add"); and ``module_params``, the module parameter each graph
    parameter starts from (``bind``)."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self.name = ""
        self.module_params: dict[str, str] = {}
        #: the inputs made for constant ids so far, by fill and length
        #: (``views.fill_input``)
        self.fills: dict[tuple[str, int], Tensor] = {}
        self._used: set[str] = set()

    @contextlib.contextmanager
    def naming(self, module: tuple[str, bool], node: Node) -> Iterator[None]:
        path, layer = module
        taken = path in self._used or self.builder.has_op(path)
        name = path if layer and path and not taken else \
            f"{path}.{node.name}" if path else str(node.name)
        self._used.add(name)
        self.name = name
        yield

    def free_name(self, base: str) -> str:
        """``base``, or ``base_2``, ``base_3``...: a name no op has or is about to get."""
        name, n = base, 1
        while name in self._used or self.builder.has_op(name):
            n += 1
            name = f"{base}_{n}"
        self._used.add(name)
        return name

    def bind(self, output: Tensor, **refs: Any) -> Tensor:
        """Record that the parameters of ``output``'s op, by role, are the module's
        ``refs`` (ParamRef, or None for a role the op does not have); returns
        ``output``."""
        op = output.producer
        assert op is not None
        for spec, param in zip(op.param_specs, op.params):
            ref = refs.get(spec.role)
            if isinstance(ref, ParamRef):
                if ref.shape != param.shape:
                    raise Unmappable(f"{ref.name} has shape {list(ref.shape)}, the op's "
                                     f"{spec.role} {list(param.shape)}")
                self.module_params[param.name] = ref.name
        return output


def owner(weight: Any) -> str | None:
    """The module a parameter belongs to ("layer1.0.conv1" of its weight): the key ops
    share it by, so a module run twice keeps one set of weights."""
    return weight.name.rpartition(".")[0] or weight.name if isinstance(weight, ParamRef) \
        else None
