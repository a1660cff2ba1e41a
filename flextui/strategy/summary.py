"""Plain-data view of a strategy, shared by the CLI and the app."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from flextui.graph import DimKind, OpGraph
from flextui.strategy.strategy import Strategy


def parallelism_kind(op, config) -> str:
    """'single' (one task), or the SOAP kinds of the split dims joined by '+'
    ('sample', 'parameter', 'sample+attribute', ...)."""
    kinds = [d.kind for d, n in zip(op.space, config.degrees) if n > 1]
    if not kinds:
        return "single"
    return "+".join(k.value for k in DimKind if k in kinds)


def device_list(devices: Sequence[int]) -> str:
    """Device indices for people: "0-3" for a run of more than two, else "0,2"."""
    if len(devices) > 2 and list(devices) == list(range(devices[0], devices[-1] + 1)):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


def split_text(row: dict[str, Any]) -> str:
    """An op's split for people (``row`` as ``strategy_rows`` gives it): its degrees
    ("sample=4 channel=2", "1" when whole), and "recompute" when it is recomputed."""
    degrees = " ".join(f"{k}={v}" for k, v in row["degrees"].items()) or "1"
    return f"{degrees} recompute" if row["recompute"] else degrees


def strategy_rows(strategy: Strategy, graph: OpGraph) -> list[dict[str, Any]]:
    rows = []
    for op in graph.ops:
        config = strategy[op.name]
        rows.append({
            "op": op.name,
            "type": op.type,
            "degrees": {d.name: n for d, n in zip(op.space, config.degrees) if n > 1},
            "tasks": config.num_tasks,
            "devices": list(config.devices),
            "parallelism": parallelism_kind(op, config),
            "recompute": config.recompute,
        })
    return rows


def strategy_summary(strategy: Strategy, graph: OpGraph) -> dict[str, Any]:
    rows = strategy_rows(strategy, graph)
    return {
        "name": strategy.name,
        "ops": len(rows),
        "tasks": sum(r["tasks"] for r in rows),
        "devices_used": sorted(strategy.devices_used()),
        "parallelism": dict(sorted(Counter(r["parallelism"] for r in rows).items())),
        "recomputed": sum(r["recompute"] for r in rows),
    }
