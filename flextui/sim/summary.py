"""Plain-data summary of a simulated iteration, shared by the CLI and the app."""

from __future__ import annotations

from typing import Any

from flextui.graph import OpGraph
from flextui.sim.timeline import Timeline


def timeline_summary(timeline: Timeline, graph: OpGraph, top: int = 10) -> dict[str, Any]:
    makespan = timeline.makespan
    op_time = timeline.compute_by_op()
    top_ops = sorted(op_time.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {
        "iteration_s": makespan,
        "cost_s": timeline.cost,
        "memory_penalty_s": timeline.memory_penalty_s,
        "throughput_samples_per_s": graph.batch_size / makespan if makespan > 0 else None,
        "tasks": len(timeline.tasks),
        "communication_bytes": sum(link.bytes for link in timeline.links),
        "devices": [{
            "name": d.name,
            "utilization": d.busy_s / makespan if makespan > 0 else 0.0,
            "busy_s": d.busy_s, "bytes_sent": d.bytes_sent, "bytes_received": d.bytes_received,
            "memory_bytes": d.memory.total, "capacity_bytes": d.memory.capacity,
            "over_bytes": d.memory.over,
            "memory": {"parameters": d.memory.parameters, "gradients": d.memory.gradients,
                       "optimizer": d.memory.optimizer, "activations": d.memory.activations,
                       "workspace": d.memory.workspace},
        } for d in timeline.devices],
        "top_ops": [{"op": name, "compute_s": seconds} for name, seconds in top_ops],
        "overflows": timeline.overflows,
    }
