"""The shard move: set the shard stage of a run of parameters (ZeRO's stages over each
of a parameter's replica groups, ``strategy.shards``), or of every parameter at once.

Sharding trades a little for memory: the sync moves the all-reduce's bytes (as a
reduce-scatter and an all-gather) and each device updates less, so the simulator
finds it no slower; what it saves is the optimizer's state, (stage 2) the
gradients and (stage 3, for a parameter one op uses) the parameter, gathered before each
pass of its op. Like recomputation the move is made only where memory is short. A run is
consecutive parameters in the graph's order (a layer's, then the next layer's), as
sharding is applied to a model's layers; a quarter of the moves set every parameter,
as a whole-model ZeRO stage.
"""

from __future__ import annotations

import random

from flextui.graph import OpGraph
from flextui.strategy import ShardStage, Strategy
from flextui.strategy.shards import stages_for

#: the chance that a shard move sets every parameter's stage
WHOLE_MODEL = 0.25


def shard_run(graph: OpGraph, strategy: Strategy, rng: random.Random,
              continue_chance: float, top: int = ShardStage.PARAMETERS,
              ) -> dict[str, ShardStage]:
    """The parameters the move sets to a new stage (one other than the first's), each
    with that stage (those already at it, and shared ones it may not apply to, are left
    out); stages up to ``top``."""
    names = list(graph.parameters)
    if not names:
        return {}
    start = rng.randrange(len(names))
    first = names[start]
    stage = rng.choice([s for s in stages_for(first in graph.shared_parameters)
                        if s != strategy.shard(first) and s <= top])
    if rng.random() < WHOLE_MODEL:
        chosen = names
    else:
        end = start + 1
        while end < len(names) and rng.random() < continue_chance:
            end += 1
        chosen = names[start:end]
    shared = graph.shared_parameters
    return {name: stage for name in chosen if strategy.shard(name) != stage
            and stage in stages_for(name in shared)}
