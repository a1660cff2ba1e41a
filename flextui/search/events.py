"""What a search reports: one ``StepEvent`` per MCMC proposal.

A proposal gives one op a new config (and, in a tied move, the same config to the ops
sharing its weights), or (a propagation move) copies one op's config to a walk of its
neighbours; ``changes`` lists what it set either way. A shard move sets parameters'
shard stages (``stages``) and no op's config; a pipeline move sets the micro-batches
and their schedule (``pipeline``) and nothing else.

Costs are simulated iteration times in seconds (plus any memory penalty); ``memory``
is the largest per-device memory (bytes) of the proposed strategy, which is what the
time/memory frontier is drawn over.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from flextui.strategy import ParallelConfig, ShardStage
from flextui.strategy.pipeline import Pipeline


class StopReason(StrEnum):
    """Why a chain, or a whole search, stopped. Members are in order of precedence: a
    search's reason is the first of its chains' reasons in this order."""

    INTERRUPTED = "interrupted"   # stopped by the user (a key, a signal) or a failure
    TIME = "time"                 # the time budget ran out
    ITERATIONS = "iterations"     # the iteration budget ran out
    CONVERGED = "converged"       # the best stopped improving (paper 6.2)


@dataclass(frozen=True, slots=True)
class StepEvent:
    chain: int          # which independent chain (0-based)
    iteration: int      # proposals made by this chain so far, this one included (1-based)
    elapsed: float      # seconds since the chain started (across resumes)
    op: int             # index of the op the move picked
    config: ParallelConfig  # that op's config after the step (a new one, or its own
                            # when the move propagated it to neighbours)
    proposed: float     # cost of the proposed strategy (s); a lower bound if ``early``
    current: float      # cost of the chain's current strategy after this step (s)
    best: float         # cost of the chain's best strategy after this step (s)
    accepted: bool
    memory: int         # peak per-device memory of the proposed strategy (bytes)
    others: tuple[tuple[int, ParallelConfig], ...] = ()  # the other ops the move set,
                        # (op index, config): a propagation walk's neighbours in walk
                        # order, or a tied move's weight-sharing twins in graph order
    early: bool = False  # rejected before its simulation finished: ``proposed`` is only
                         # a lower bound on its cost (see ``mcmc``)
    stages: tuple[tuple[int, ShardStage], ...] = ()  # the parameters the move set a shard
                         # stage of, (index in the graph's parameters, stage), in order
    pipeline: Pipeline | None = None   # the micro-batches a pipeline move set

    @property
    def changes(self) -> tuple[tuple[int, ParallelConfig], ...]:
        """Every (op index, config) the proposal set, in the order it set them."""
        return ((self.op, self.config),) + self.others


@dataclass(frozen=True, slots=True)
class RestartEvent:
    """Chain ``chain`` went back to its best strategy after ``iteration`` steps."""

    chain: int
    iteration: int
