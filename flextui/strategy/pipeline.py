"""Pipelines: a strategy may split each batch into ``microbatches`` micro-batches
(``"microbatches": m, "schedule": "gpipe" | "1f1b"`` in a strategy file), run one after
another through the ops, their gradients summed before the parameters' sync and update.

A micro-batch is cut first and split second: op configs apply to each micro-batch, so
block ``k`` of micro-batch ``j`` covers, along a sample dim of size ``S`` split into
``n``, the samples ``j*S/m + [k*S/(n*m), (k+1)*S/(n*m))`` (``micro_region``); each
sample dim's degree times ``m`` must divide it. An op that cannot split its samples
(an imported op that computes across the batch) refuses micro-batches.

The schedule is an order of each op's tasks over micro-batches, made of dependencies
(``micro_deps``), so the simulator's scheduler and the runtime's walk need nothing
else:

- GPipe: each op's backward tasks, of any micro-batch, wait for its forward task of the
  last micro-batch on the same block: every forward before any backward (a flush), all
  ``m`` micro-batches' activations held.
- 1F1B (PipeDream-Flush): the op's forward of micro-batch ``j`` waits for its backward
  of micro-batch ``j - w`` on the same block, ``w`` the op's *window*: the number of
  pipeline stages from its own to the last (``windows``), so stage ``s`` of ``p`` holds
  at most ``p - s`` micro-batches in flight.

Stages come from the operator dim, as FlexFlow's placements do: along each path of the
graph a new stage starts where an op runs on another set of devices than the op before
it (graph inputs, which have no backward, do not count).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from flextui.errors import StrategyError
from flextui.graph import Op, OpGraph, Region
from flextui.graph.dims import Dim, DimKind
from flextui.strategy.config import ParallelConfig


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


class Pass(StrEnum):
    """An op's two passes over a micro-batch."""

    FORWARD = "f"
    BACKWARD = "b"


@dataclass(frozen=True)
class Pipeline:
    """How a strategy cuts the batch: ``microbatches`` (1: not at all) run in
    ``schedule``'s order."""

    microbatches: int = 1
    schedule: Schedule = Schedule.GPIPE

    @property
    def on(self) -> bool:
        return self.microbatches > 1

    def describe(self) -> str:
        return f"{self.microbatches} micro-batches, {self.schedule.value}" if self.on \
            else "no micro-batches"


#: a strategy without micro-batches
NO_PIPELINE = Pipeline()


def sample_dims(op: Op) -> list[int]:
    """The dims of ``op``'s space that split its samples."""
    return [i for i, d in enumerate(op.space) if d.kind == DimKind.SAMPLE]


def mixes_samples(op: Op) -> bool:
    """Whether ``op`` computes across the samples of a batch (a dim named ``sample`` it
    cannot split): its micro-batches would not add up to its batch."""
    return any(d.name == "sample" and d.kind is None for d in op.space)


def splits_micro(dim: Dim, degree: int, microbatches: int) -> bool:
    """Whether ``degree`` equal blocks of sample dim ``dim`` split each of
    ``microbatches`` micro-batches (the one rule every check and move uses)."""
    return dim.size % (degree * microbatches) == 0


def micro_region(op: Op, region: Region, microbatches: int, j: int) -> Region:
    """The block ``region`` of the whole batch's space as micro-batch ``j`` of
    ``microbatches`` runs it (see the module docstring); ``region`` itself without
    micro-batches."""
    if microbatches == 1:
        return region
    out = list(region)
    for i in sample_dims(op):
        size = op.space[i].size // microbatches
        lo, hi = region[i]
        out[i] = (j * size + lo // microbatches, j * size + hi // microbatches)
    return tuple(out)


def micro_block_shape(op: Op, config: ParallelConfig, microbatches: int) -> tuple[int, ...]:
    """The shape of every block of ``op`` in one micro-batch."""
    shape = list(config.block_shape(op))
    for i in sample_dims(op):
        shape[i] //= microbatches
    return tuple(shape)


def pipeline_refusal(graph: OpGraph, configs: Sequence[ParallelConfig], pipeline: Pipeline,
                     ) -> str | None:
    """Why ``graph`` under ``configs`` (by op index) cannot run in ``pipeline``'s
    micro-batches, or None."""
    if pipeline.microbatches < 1:
        return f"{pipeline.microbatches} micro-batches: give 1 or more"
    for op in graph.ops:
        refusal = micro_refusal(op, configs[op.index], pipeline.microbatches)
        if refusal:
            return refusal
    return None


def micro_refusal(op: Op, config: ParallelConfig, microbatches: int) -> str | None:
    """Why ``op`` under ``config`` cannot run in ``microbatches`` micro-batches, or None."""
    m = microbatches
    if m == 1:
        return None
    if mixes_samples(op):
        return (f"op {op.name!r:.60} computes across the samples of a batch, so {m} "
                "micro-batches would change what it computes; drop \"microbatches\"")
    for i in sample_dims(op):
        dim, degree = op.space[i], config.degrees[i]
        if not splits_micro(dim, degree, m):
            fits = [d for d in dim.valid_degrees() if splits_micro(dim, d, m)]
            return (f"op {op.name!r:.60}: its {dim.name} dim (size {dim.size}) does not "
                    f"split into {m} micro-batches of {degree} blocks each; "
                    + (f"give it a degree in {fits}" if fits else
                       f"choose microbatches dividing {dim.size}"))
    return None


def microbatch_choices(graph: OpGraph, configs: Sequence[ParallelConfig], most: int = 64,
                       ) -> list[int]:
    """The micro-batch counts up to ``most`` that every op's sample split allows."""
    if any(mixes_samples(op) for op in graph.ops):
        return [1]
    return [m for m in range(1, most + 1)
            if all(micro_refusal(op, configs[op.index], m) is None for op in graph.ops)]


def stages(graph: OpGraph, configs: Sequence[ParallelConfig]) -> list[int]:
    """Each op's pipeline stage, by op index (a graph input's: 0): along every path, one
    more wherever an op's devices are another set than its producer's."""
    preds, _ = graph.neighbour_indices
    inputs = {op.index for op in graph.ops if op.type == "input"}
    devices = [frozenset(c.devices) for c in configs]
    stage = [0] * len(graph.ops)
    for i, before in enumerate(preds):
        stage[i] = max((stage[p] + (devices[p] != devices[i]) for p in before
                        if p not in inputs), default=0)
    return stage


def stage_links(graph: OpGraph, configs: Sequence[ParallelConfig],
                stage: Sequence[int] | None = None) -> frozenset[tuple[int, int]]:
    """The (last, first) op index pairs that take a stage's micro-batches through it one
    after another: in each stage (its ops of one stage index on one set of devices),
    every op no other op of the stage reads (a last) with every op that reads none of
    them (a first). A first's forward of micro-batch ``j`` waits for each last's of
    ``j - 1``, and a last's backward of ``j`` for each first's of ``j - 1``: without
    these a scheduler that runs tasks as they come ready would take each op through
    every micro-batch before the next op takes the first. ``stage``: ``stages``' answer,
    where the caller has it."""
    stage = stages(graph, configs) if stage is None else stage
    preds, succs = graph.neighbour_indices
    group = [(stage[i], frozenset(c.devices)) for i, c in enumerate(configs)]
    firsts: dict[tuple[int, frozenset[int]], list[int]] = {}
    lasts: dict[tuple[int, frozenset[int]], list[int]] = {}
    for i, g in enumerate(group):
        if all(group[p] != g for p in preds[i]):
            firsts.setdefault(g, []).append(i)
        if all(group[c] != g for c in succs[i]):
            lasts.setdefault(g, []).append(i)
    return frozenset((z, a) for g, ends in lasts.items() for z in ends for a in firsts[g])


def windows(graph: OpGraph, configs: Sequence[ParallelConfig], pipeline: Pipeline,
            stage: Sequence[int] | None = None) -> list[int]:
    """Per op (by index), how many micro-batches it holds in flight: all of them under
    GPipe, the stages from its own to the last under 1F1B (never more than there are).
    ``stage``: ``stages``' answer, where the caller has it."""
    m = pipeline.microbatches
    if pipeline.schedule == Schedule.GPIPE or m == 1:
        return [m] * len(graph.ops)
    stage = stages(graph, configs) if stage is None else stage
    last = max(stage, default=0)
    return [min(m, last - s + 1) for s in stage]


def micro_deps(pipeline: Pipeline, window: int,
               ) -> list[tuple[tuple[Pass, int], tuple[Pass, int]]]:
    """The dependencies that order one op's passes over micro-batches, as pairs
    (before, after) of ``(pass, micro-batch)``; each holds block by block (a block's
    task waits for the same block's)."""
    m = pipeline.microbatches
    if m == 1:
        return []
    if pipeline.schedule == Schedule.GPIPE:
        return [((Pass.FORWARD, m - 1), (Pass.BACKWARD, j)) for j in range(m - 1)]
    return [((Pass.BACKWARD, j - window), (Pass.FORWARD, j)) for j in range(window, m)]


def check_pipeline(graph: OpGraph, configs: Sequence[ParallelConfig], pipeline: Pipeline,
                   ) -> None:
    refusal = pipeline_refusal(graph, configs, pipeline)
    if refusal:
        raise StrategyError(refusal)
