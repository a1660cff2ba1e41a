"""Plain-data summaries of a graph, shared by the CLI (text and --json) and the app."""

from __future__ import annotations

from collections import Counter
from typing import Any

from flextui.graph.graph import OpGraph
from flextui.graph.region import full_region


def graph_summary(graph: OpGraph) -> dict[str, Any]:
    fwd, bwd = graph.total_flops()
    return {
        "name": graph.name,
        "model": graph.meta.get("model", graph.name),
        "family": graph.family,
        "batch_size": graph.batch_size,
        "options": graph.meta.get("options", {}),
        "ops": len(graph),
        "op_types": dict(sorted(Counter(op.type for op in graph.ops).items())),
        "parameters": graph.param_count,
        "parameter_bytes": sum(p.nbytes for p in graph.parameters.values()),
        "forward_flops": fwd,
        "backward_flops": bwd,
        "fingerprint": graph.fingerprint,
    }


def op_rows(graph: OpGraph) -> list[dict[str, Any]]:
    """One row per op: its type, output shapes, partition dims (with S/A/P kinds),
    parameter count, the names of its parameters (as a strategy file names them) and
    forward FLOPs."""
    rows = []
    for op in graph.ops:
        rows.append({
            "name": op.name,
            "type": op.type,
            "layer": op.layer,
            "outputs": [list(t.shape) for t in op.outputs],
            "dims": [{"name": d.name, "size": d.size, "kind": d.kind.value if d.kind else None}
                     for d in op.space],
            "parameters": op.param_count,
            "params": [p.name for p in op.params],
            "shared": op.shared,
            "forward_flops": op.flops(full_region(op.space_shape))[0],
        })
    return rows
