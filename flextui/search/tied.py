"""Tied moves: give an op's new config to every op that shares its weights.

An unrolled RNN repeats one layer at every step, each step an op of its own, all
sharing the layer's parameters. Their gradients are all-reduced together, so moving
one step's op to a new partitioning saves nothing on that sync while the other steps
still hold replicas everywhere, and it adds transfers at the op's edges: the search
would have to climb through up to ``steps - 1`` worse strategies before the layer's
parameter sync gets cheaper (RNNLM's and NMT's embeddings: tens of milliseconds per
iteration at 16 GPUs). A tied move changes the whole layer in one step.

Ops are tied when they share a parameter, directly or through a chain of shared
parameters, and have the same partition space (names, sizes and kinds of its dims),
so a config valid for one is valid for all of them.
"""

from __future__ import annotations

from flextui.graph import Op, OpGraph


def tied_groups(graph: OpGraph) -> dict[int, tuple[Op, ...]]:
    """For each op with weight-sharing twins, the twins (itself left out), in graph
    order; ops without any are absent."""
    parent = {op.index: op.index for op in graph.ops}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_user: dict[str, int] = {}
    for op in graph.ops:
        for p in op.params:
            other = first_user.setdefault(p.name, op.index)
            parent[root(op.index)] = root(other)
    groups: dict[tuple, list[Op]] = {}
    for op in graph.ops:
        groups.setdefault((root(op.index), op.type, tuple(op.space)), []).append(op)
    return {op.index: tuple(o for o in members if o is not op)
            for members in groups.values() if len(members) > 1 for op in members}
