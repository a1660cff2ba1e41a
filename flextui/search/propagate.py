"""Propagation moves: copy an op's config along the graph (as public FlexFlow's MCMC
does with its ``propagate`` rewrite).

A single-op proposal that moves one op of a chain onto new devices first adds
transfers on both of its edges, so reaching a strategy where a whole run of ops shares
one partitioning means climbing. A propagation move walks from a random op to a
neighbour (producer or consumer), giving the neighbour the config the walk carries,
and goes on to a further neighbour with probability ``continue_chance``; edges are
chosen with probability proportional to the size of the tensor they carry, so the
big transfers are the ones aligned first.

An op adopts a config when the two ops' partition spaces have the same rank and every
degree is valid for the neighbour (the same blocks on the same devices, so the edge
needs no transfer when the shapes agree), or, across a change of rank, when the config
splits only the sample dim (the neighbour splits its own sample dim alike; FlexFlow's
rule for data-parallel configs). The devices are kept as they are.
"""

from __future__ import annotations

import math
import random

from flextui.graph import Op, OpGraph
from flextui.graph.dims import DimKind
from flextui.strategy import ParallelConfig, Strategy


def adopted_config(config: ParallelConfig, source: Op, target: Op) -> ParallelConfig | None:
    """``target``'s version of ``source``'s ``config``, or None when it has none."""
    if len(source.space) == len(target.space):
        degrees = config.degrees
    else:
        split = [i for i, n in enumerate(config.degrees) if n > 1]
        if not split:
            degrees = (1,) * len(target.space)
        else:
            sample = [i for i, d in enumerate(target.space) if d.kind is DimKind.SAMPLE]
            if len(split) > 1 or source.space[split[0]].kind is not DimKind.SAMPLE or not sample:
                return None
            degrees = tuple(config.degrees[split[0]] if i == sample[0] else 1
                            for i in range(len(target.space)))
    for n, dim in zip(degrees, target.space):
        if n > 1 and (not dim.parallel or dim.splits % n):
            return None
    return ParallelConfig(degrees, config.devices)


def edge_volume(graph: OpGraph, a: Op, b: Op) -> int:
    """Elements of the tensors flowing between ``a`` and ``b`` (either way)."""
    return sum(math.prod(t.shape) for x, y in ((a, b), (b, a)) for t in y.inputs
               if t.producer is x)


def propagation(graph: OpGraph, start: Op, strategy: Strategy, rng: random.Random,
                continue_chance: float) -> list[tuple[Op, ParallelConfig]]:
    """The ops a propagation walk from ``start`` changes, each with its new config, in
    walk order (ops whose config the walk leaves as it was are left out)."""
    changes: list[tuple[Op, ParallelConfig]] = []
    seen = {start.index}
    op, config = start, strategy[start.name]
    while True:
        choices, weights = [], []
        for near in graph.predecessors(op) + graph.successors(op):
            if near.index in seen:
                continue
            adopted = adopted_config(config, op, near)
            if adopted is not None:  # the split moves; recomputation stays the op's own
                choices.append((near, adopted.with_recompute(strategy[near.name].recompute)))
                weights.append(edge_volume(graph, op, near))
        if not choices:
            break
        near, adopted = rng.choices(choices, weights)[0]
        if adopted != strategy[near.name]:
            changes.append((near, adopted))
        seen.add(near.index)
        op, config = near, adopted
        if rng.random() >= continue_chance:
            break
    return changes
