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
    ("sample=4 channel=2", "1" when whole), "recompute" when it is recomputed, and
    "shard N" when its parameters' training state is sharded (N: the highest stage)."""
    text = " ".join(f"{k}={v}" for k, v in row["degrees"].items()) or "1"
    if row["recompute"]:
        text += " recompute"
    if row["shards"]:
        text += f" shard {max(row['shards'].values())}"
    return text


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
            "shards": {p.name: int(strategy.shard(p.name)) for p in op.params
                       if strategy.shard(p.name)},
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
        "sharded": sharded_counts(strategy),
        "precision": strategy.precision.value,
        "microbatches": strategy.pipeline.microbatches,
        "schedule": strategy.pipeline.schedule.value,
    }


def sharded_counts(strategy: Strategy) -> dict[str, int]:
    """How many parameters each shard stage has ({"2": 10, "1": 3}), highest first."""
    counts = Counter(int(stage) for stage in strategy.shards.values())
    return {str(stage): counts[stage] for stage in sorted(counts, reverse=True)}


def sharded_text(counts: dict[str, int]) -> str:
    """``sharded_counts`` for people: "12 parameters sharded (stage 2: 10, stage 1: 2)"."""
    total = sum(counts.values())
    stages = ", ".join(f"stage {stage}: {n}" for stage, n in counts.items())
    return f"{total} parameter{'s' * (total != 1)} sharded ({stages})"
