"""What an import cannot map, gathered over the whole graph before anything fails."""

from __future__ import annotations

from dataclasses import dataclass

from flextui.errors import GraphError


@dataclass
class Unmapped:
    """One kind of ATen op the importer cannot map: how often, where first, and why."""

    target: str
    count: int
    module: str
    source: str
    why: str


class UnsupportedOps(GraphError):
    """Every op of a module the importer cannot partition, once each with its count."""

    def __init__(self, model: str, found: list[Unmapped]) -> None:
        self.model, self.found = model, found
        lines = [f"model {model!r}: {len(found)} kind{'s' if len(found) != 1 else ''} of op "
                 "flextui cannot partition yet:"]
        for u in found:
            where = f" in {u.module}" if u.module else ""
            at = f" ({u.source})" if u.source else ""
            lines.append(f"  {u.target} x{u.count}{where}{at}: {u.why}")
        super().__init__("\n".join(lines))


class Gather:
    """Collects unmapped ops by target, keeping the first place each was seen."""

    def __init__(self) -> None:
        self.seen: dict[str, Unmapped] = {}

    def add(self, target: str, module: str, source: str, why: str) -> None:
        known = self.seen.get(target)
        if known is None:
            self.seen[target] = Unmapped(target, 1, module, source, why)
        else:
            known.count += 1

    def raise_if_any(self, model: str) -> None:
        if self.seen:
            raise UnsupportedOps(model, list(self.seen.values()))
