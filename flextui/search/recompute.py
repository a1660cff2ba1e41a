"""The recomputation move: switch recomputation on (or off) for an op and, often, for
a run of ops after it, each keeping its split.

Recomputing trades time for memory (a recomputed op keeps no activation; its backward
re-runs its forward), so the move only pays where memory is short: under a memory
budget, or on devices a model does not fit. A run follows the graph forward from the
picked op, one successor at a time, as activation checkpointing is applied to a run of
layers; graph inputs are never recomputed (they have no backward pass).
"""

from __future__ import annotations

import random

from flextui.graph import Op, OpGraph
from flextui.strategy import ParallelConfig, Strategy


def recompute_run(graph: OpGraph, start: Op, strategy: Strategy, rng: random.Random,
                  continue_chance: float) -> list[tuple[Op, ParallelConfig]]:
    """The ops the move changes, from ``start`` forward, each with its config
    recomputed as ``start``'s is not (ops already so are passed over, not changed)."""
    recompute = not strategy[start.name].recompute
    changes: list[tuple[Op, ParallelConfig]] = []
    op: Op | None = start
    seen: set[int] = set()
    while op is not None and op.index not in seen:
        seen.add(op.index)
        config = strategy[op.name]
        if op.type != "input" and config.recompute != recompute:
            changes.append((op, config.with_recompute(recompute)))
        after = graph.successors(op)
        if not after or rng.random() >= continue_chance:
            break
        op = rng.choice(after)
    return changes
