"""A quick lower bound on the iteration time of every strategy: the least compute work
the graph can be done in, spread evenly over the devices.

Each op needs at least the smallest total task time any of its configs gives it (each
task timed on the fastest device kind there is), and a device runs one compute task
at a time, so no strategy finishes before that work divided by the device count.
Transfers, syncs and updates only add to it. The bound is cheap (one cost query per
degree tuple of each op), and tells how much a search could still find: when a
strategy's time is within a few percent of it, no strategy is much faster.
"""

from __future__ import annotations

import math

from flextui.cost.model import CostModel
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.strategy import ParallelConfig, degree_choices


def work_lower_bound(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                     training: bool = True) -> float:
    """Seconds: no strategy for ``graph`` on ``cluster`` simulates faster."""
    kinds = list({cluster.device(d).spec.kind: cluster.device(d)
                  for d in range(cluster.num_devices)}.values())
    work = 0.0
    for op in graph.ops:
        backward = training and op.type != "input"
        least = math.inf
        for degrees in degree_choices(op, cluster.num_devices):
            tasks = math.prod(degrees)
            shape = ParallelConfig(degrees, tuple(range(tasks))).block_shape(op)
            for device in kinds:
                cost = cost_model.op_cost(op, shape, device)
                least = min(least,
                            tasks * (cost.forward_s + (cost.backward_s if backward else 0.0)))
        work += least
    return work / cluster.num_devices
