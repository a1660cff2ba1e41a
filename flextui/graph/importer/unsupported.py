"""What an import cannot map, gathered over the whole graph before anything fails: the
walk goes on past an op it cannot map, with a tensor of the op's shape standing in for
its result (``stand_in``), so that one run names every kind of op it cannot map."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from flextui.errors import GraphError
from flextui.graph.tensor import Tensor


@dataclass
class Unmapped:
    """One kind of ATen op the importer cannot map: how often, where first, and why."""

    target: str
    count: int
    module: str
    source: str
    why: str
    #: every one of them is a variant of a mapped op, refused where it reads what an op
    #: that cannot be mapped makes (a stand-in): it may map once that op does
    downstream: bool = False


class UnsupportedOps(GraphError):
    """Every op of a module the importer cannot partition, once each with its count."""

    def __init__(self, model: str, found: list[Unmapped], hint: str = "") -> None:
        self.model, self.found = model, found
        lines = [f"model {model!r}: {len(found)} kind{'s' if len(found) != 1 else ''} of op "
                 "flextui cannot partition yet:"]
        for u in found:
            where = f" in {u.module}" if u.module else ""
            at = f" ({u.source})" if u.source else ""
            after = " (after an op that cannot be mapped: may go with it)" \
                if u.downstream else ""
            lines.append(f"  {u.target} x{u.count}{where}{at}: {u.why}{after}")
        super().__init__("\n".join([*lines, *([hint] if hint else [])]))


class Gather:
    """Collects unmapped ops by target, keeping the first place each was seen."""

    def __init__(self) -> None:
        self.seen: dict[str, Unmapped] = {}

    def add(self, target: str, module: str, source: str, why: str,
            downstream: bool = False) -> None:
        known = self.seen.get(target)
        if known is None:
            self.seen[target] = Unmapped(target, 1, module, source, why, downstream)
        elif known.downstream and not downstream:  # the first place it is certain
            self.seen[target] = Unmapped(target, known.count + 1, module, source, why)
        else:
            known.count += 1

    def raise_if_any(self, model: str, hint: str = "") -> None:
        """UnsupportedOps naming every kind of op gathered, then ``hint``."""
        if self.seen:
            raise UnsupportedOps(model, list(self.seen.values()), hint)


def stand_in(value: Any, name: str) -> Any:
    """What stands in for an unmapped node whose exported value is ``value``: a tensor
    of its shape and dtype that no op makes (a list of them, a number as it is); None
    when nothing can."""
    if isinstance(value, torch.Tensor):
        return Tensor(f"{name}:unmapped", tuple(int(s) for s in value.shape),
                      str(value.dtype).removeprefix("torch."))
    if isinstance(value, (list, tuple)):
        return [stand_in(v, f"{name}.{i}") for i, v in enumerate(value)]
    return value if isinstance(value, (int, float, bool)) else None
