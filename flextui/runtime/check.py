"""Whether a checked run (``Training.check``) equals its referee in one process (the
user's module, or the graph flextui built: ``referee``): each rank's largest relative
errors, of its parameter shards and of every step's loss, within 1e-9 (the run is in
float64). A strategy in bf16 is compared with the graph's one-process run in bf16 (its
parameters in float64), within 1e-3: partial sums rounded to bfloat16 in another order
differ by that much (measured: at most 1.0e-4 on the five small models under six
strategies, 3 steps on 2 ranks; the whole run in bf16 is itself 4e-5 to 1.2e-4 from the
run in float32, so the check shows a partitioning error, not the precision's)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flextui.graph import OpGraph
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Check, RankRecord
from flextui.strategy import Strategy
from flextui.strategy.precision import Precision

TOLERANCE = 1e-9
BF16_TOLERANCE = 1e-3


def tolerance_for(precision: Precision) -> float:
    return BF16_TOLERANCE if precision == Precision.BF16 else TOLERANCE


class Referee(StrEnum):
    """What a check compares a run with (``runtime.referee``), in its report's words."""

    MODULE = "one process of the module (plain PyTorch)"
    GRAPH = "one process"


def referee_of(graph: OpGraph, strategy: Strategy | None = None) -> Referee:
    """The user's module for an imported graph, but for a strategy in bf16 (the module
    does not compute in flextui's bf16 blocks): the graph."""
    bf16 = strategy is not None and strategy.precision != Precision.FP32
    return Referee.MODULE if graph.imported and not bf16 else Referee.GRAPH


@dataclass(frozen=True)
class CheckResult:
    ranks: int
    steps: int
    worst: float
    equal: bool
    message: str
    referee: Referee = Referee.GRAPH
    tolerance: float = TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "steps": self.steps, "worst_relative_error": self.worst,
                "tolerance": self.tolerance, "equal": self.equal, "message": self.message,
                "referee": self.referee.name.lower()}


def check_result(outcome: Outcome, records: Iterable[RankRecord],
                 referee: Referee = Referee.GRAPH, tolerance: float = TOLERANCE) -> CheckResult:
    checks = [r for r in records if isinstance(r, Check)]
    if outcome.status != RunStatus.FINISHED:
        return CheckResult(len(checks), 0, float("inf"), False,
                           f"the check run did not finish: {outcome.message}", referee,
                           tolerance)
    if not checks:
        return CheckResult(0, 0, float("inf"), False, "no rank reported a check", referee,
                           tolerance)
    worst = max(checks, key=lambda c: c.worst)
    steps = len(checks[0].losses)
    if worst.worst <= tolerance:
        return CheckResult(len(checks), steps, worst.worst, True, "equal", referee, tolerance)
    return CheckResult(len(checks), steps, worst.worst, False,
                       f"rank {worst.rank} is {worst.worst:.1e} away from {referee} (loss "
                       f"{worst.loss_error:.1e}, parameters {worst.param_error:.1e}; "
                       f"tolerance {tolerance:.0e})", referee, tolerance)
