"""The order every rank walks a training step's passes in: ``(pass, op index,
micro-batch)`` (``pipeline.Pass``), the same list on every rank, so
the pieces each pair of ranks exchanges at an op's pass match.

Without micro-batches: every op's forward in topological order, then every backward
(a graph input has none) in reverse. With micro-batches the walk is the pipeline's
schedule: the passes of every micro-batch, under the dependencies the simulator's
task graph has (the graph's edges within a micro-batch, and the schedule's between
them: ``pipeline.micro_deps`` and ``pipeline.stage_links``), listed in the order a
list schedule runs them when each pass holds its op's devices for a forward's unit of
time (a backward's two), ties
broken as the simulator's keys break them. Each rank then runs its own passes in the
schedule's order: GPipe's forward passes before its backward ones, 1F1B's warm-up and
alternation stage by stage (on a uniform pipeline, the simulated order exactly).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from flextui.graph import OpGraph
from flextui.strategy import ParallelConfig
from flextui.strategy.pipeline import Pass, Pipeline, micro_deps, stage_links, windows

#: one pass of one op on one micro-batch: (pass, op index, micro-batch)
Step = tuple[Pass, int, int]

#: the time a list schedule gives a pass, to order the walk (a backward costs about two
#: forwards)
_UNITS = {Pass.FORWARD: 1, Pass.BACKWARD: 2}
F, B = Pass.FORWARD, Pass.BACKWARD


def walk(graph: OpGraph, configs: Sequence[ParallelConfig], pipeline: Pipeline,
         training: bool = True) -> list[Step]:
    """Every pass of a step, in the order ranks run them (see the module docstring)."""
    m = pipeline.microbatches
    backward = [op.index for op in reversed(graph.ops) if op.type != "input"]
    if m == 1 or not training:
        return [(F, op.index, j) for j in range(m) for op in graph.ops] + \
            ([(B, i, 0) for i in backward] if training else [])
    n = len(graph.ops)
    has_backward = set(backward)
    succs: dict[Step, list[Step]] = {}
    waiting: dict[Step, int] = {}

    def depend(before: Step, after: Step) -> None:
        succs.setdefault(before, []).append(after)
        waiting[after] = waiting.get(after, 0) + 1

    window = windows(graph, configs, pipeline)
    for j in range(m):
        for op in graph.ops:
            i = op.index
            waiting.setdefault((F, i, j), 0)
            for p in graph.predecessors(op):
                depend((F, p.index, j), (F, i, j))
            if i not in has_backward:
                continue
            depend((F, i, j), (B, i, j))
            for c in graph.successors(op):
                depend((B, c.index, j), (B, i, j))
    for i in has_backward:
        for (pa, ja), (pb, jb) in micro_deps(pipeline, window[i]):
            depend((pa, i, ja), (pb, i, jb))
    for z, a in stage_links(graph, configs):
        for j in range(1, m):
            depend((F, z, j - 1), (F, a, j))
            if z in has_backward and a in has_backward:
                depend((B, a, j - 1), (B, z, j))
    devices = [tuple(sorted(set(c.devices))) for c in configs]

    def key(p: Step) -> tuple[int, int]:
        phase, i, j = p
        return (0, j * n + i) if phase == F else (1, j * n - i)

    free: dict[int, int] = {}
    ready = [(0, key(p), p) for p, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    at: dict[Step, int] = {}
    order: list[tuple[int, tuple[int, int], Step]] = []
    while ready:
        t, k, done = heapq.heappop(ready)
        start = max([t] + [free.get(d, 0) for d in devices[done[1]]])
        end = start + _UNITS[done[0]]
        for d in devices[done[1]]:
            free[d] = end
        order.append((start, k, done))
        for s in succs.get(done, ()):
            at[s] = max(at.get(s, 0), end)
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (at[s], key(s), s))
    if len(order) != len(waiting):
        raise RuntimeError("a step's passes depend on each other in a cycle")
    return [done for _, _, done in sorted(order)]
