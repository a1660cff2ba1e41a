"""What a search reports: one ``StepEvent`` per MCMC proposal.

Costs are simulated iteration times in seconds (plus any memory penalty); ``memory``
is the largest per-device memory (bytes) of the proposed strategy, which is what the
time/memory frontier is drawn over.
"""

from __future__ import annotations

from dataclasses import dataclass

from flextui.strategy import ParallelConfig


@dataclass(frozen=True, slots=True)
class StepEvent:
    chain: int          # which independent chain (0-based)
    iteration: int      # proposals made by this chain so far, this one included (1-based)
    elapsed: float      # seconds since the chain started (across resumes)
    op: int             # index of the op whose config was replaced
    config: ParallelConfig  # the config it was given
    proposed: float     # cost of the proposed strategy (s)
    current: float      # cost of the chain's current strategy after this step (s)
    best: float         # cost of the chain's best strategy after this step (s)
    accepted: bool
    memory: int         # peak per-device memory of the proposed strategy (bytes)


@dataclass(frozen=True, slots=True)
class RestartEvent:
    """Chain ``chain`` went back to its best strategy after ``iteration`` steps."""

    chain: int
    iteration: int
