"""The search's pipeline moves (``strategy.pipeline``).

- The pipeline move sets another number of micro-batches (one every op's sample split
  allows, up to ``MOST_MICROBATCHES``) or, half the time when there are micro-batches,
  the other schedule. Every task changes, so it is simulated in full.
- The stage move puts a run of consecutive layers (``Op.layer``, in the graph's order)
  on one aligned group of devices (a block of a size that divides the device count,
  starting at a multiple of it: a node's GPUs, half of them, ...): each op keeps its
  split if it has as many tasks as the group has devices, else it is split by samples
  over the group (as far as a micro-batch's samples allow). Stages then emerge in a few
  steps where one-op moves would climb through the transfers each of them adds.
- ``fitted`` cuts a strategy into micro-batches, lowering the sample splits a
  micro-batch does not allow: where a search given ``--microbatches`` starts.
"""

from __future__ import annotations

import math
import random

from flextui.errors import StrategyError
from flextui.graph import Op, OpGraph
from flextui.strategy import ParallelConfig, Strategy
from flextui.strategy.pipeline import (
    Pipeline,
    Schedule,
    micro_refusal,
    microbatch_choices,
    mixes_samples,
    sample_dims,
    splits_micro,
)

#: the most micro-batches a pipeline move sets
MOST_MICROBATCHES = 32


def pipeline_move(graph: OpGraph, strategy: Strategy, rng: random.Random,
                  draw_schedule: bool = False, most: int = MOST_MICROBATCHES
                  ) -> Pipeline | None:
    """Another pipeline for ``strategy`` of at most ``most`` micro-batches (None when
    there is none to move to); from one micro-batch, with ``draw_schedule``, under
    either schedule (else under the one the strategy names)."""
    now = strategy.pipeline
    counts = [m for m in microbatch_choices(graph, strategy.configs_of(graph),
                                            min(most, MOST_MICROBATCHES))
              if m != now.microbatches]
    other = Schedule.ONE_F_ONE_B if now.schedule == Schedule.GPIPE else Schedule.GPIPE
    if now.on and (not counts or rng.random() < 0.5):
        return Pipeline(now.microbatches, other)
    if not counts:
        return None
    schedule = rng.choice(list(Schedule)) if draw_schedule and not now.on else now.schedule
    return Pipeline(rng.choice(counts), schedule)


def stage_run(graph: OpGraph, op: Op, strategy: Strategy, num_devices: int,
              rng: random.Random, continue_chance: float) -> list[tuple[Op, ParallelConfig]]:
    """The ops of ``op``'s layer and often of the layers after it, each with its config
    on one aligned device group (see the module docstring); those already so left out."""
    layers = list(dict.fromkeys(o.layer for o in graph.ops))
    first = layers.index(op.layer)
    end = first + 1
    while end < len(layers) and rng.random() < continue_chance:
        end += 1
    chosen = set(layers[first:end])
    size = rng.choice([g for g in range(1, num_devices + 1) if num_devices % g == 0])
    start = size * rng.randrange(num_devices // size)
    group = tuple(range(start, start + size))
    m = strategy.pipeline.microbatches
    changes = []
    for o in graph.ops:
        if o.layer in chosen:
            config = on_group(o, strategy[o.name], group, m)
            if config != strategy[o.name]:
                changes.append((o, config))
    return changes


def on_group(op: Op, config: ParallelConfig, group: tuple[int, ...], microbatches: int,
             ) -> ParallelConfig:
    """``op`` on the devices ``group``: its own split there if it has a task per device,
    else split by samples over as many of them as a micro-batch's samples allow."""
    if config.num_tasks == len(group):
        return ParallelConfig(config.degrees, group, config.recompute)
    degrees = [1] * len(op.space)
    dims = sample_dims(op)
    if dims and not mixes_samples(op):
        dim = op.space[dims[0]]
        degrees[dims[0]] = max(d for d in range(1, len(group) + 1)
                               if len(group) % d == 0 and splits_micro(dim, d, microbatches))
    return ParallelConfig(tuple(degrees), group[:math.prod(degrees)], config.recompute)


def fitted(graph: OpGraph, strategy: Strategy, pipeline: Pipeline) -> Strategy:
    """``strategy`` in ``pipeline``'s micro-batches, each op whose sample split a
    micro-batch does not allow split less (on the first of its devices); a
    StrategyError when the graph cannot run in micro-batches."""
    m = pipeline.microbatches
    changes = {}
    for op in graph.ops:
        config = strategy[op.name]
        refusal = micro_refusal(op, config, m)
        if refusal is None:
            continue
        if mixes_samples(op):
            raise StrategyError(refusal)
        degrees = list(config.degrees)
        for i in sample_dims(op):
            if not splits_micro(op.space[i], 1, m):
                raise StrategyError(f"{m} micro-batches do not divide the batch of op "
                                    f"{op.name!r:.60} ({op.space[i].size} samples)")
            degrees[i] = max(d for d in range(1, degrees[i] + 1)
                             if degrees[i] % d == 0 and splits_micro(op.space[i], d, m))
        tasks = math.prod(degrees)
        changes[op.name] = ParallelConfig(tuple(degrees), config.devices[:tasks],
                                          config.recompute)
    return strategy.replace_all(changes).with_pipeline(pipeline)
