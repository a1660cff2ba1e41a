"""Whether a checked run (``Training.check``) equals its referee in one process (the
user's module, or the graph flextui built: ``referee``): each rank's largest relative
errors, of its parameter shards and of every step's loss, within 1e-9 (the run is in
float64)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flextui.graph import OpGraph
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Check, RankRecord

TOLERANCE = 1e-9


class Referee(StrEnum):
    """What a check compares a run with (``runtime.referee``), in its report's words."""

    MODULE = "one process of the module (plain PyTorch)"
    GRAPH = "one process"


def referee_of(graph: OpGraph) -> Referee:
    return Referee.MODULE if graph.imported else Referee.GRAPH


@dataclass(frozen=True)
class CheckResult:
    ranks: int
    steps: int
    worst: float
    equal: bool
    message: str
    referee: Referee = Referee.GRAPH

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "steps": self.steps, "worst_relative_error": self.worst,
                "tolerance": TOLERANCE, "equal": self.equal, "message": self.message,
                "referee": self.referee.name.lower()}


def check_result(outcome: Outcome, records: Iterable[RankRecord],
                 referee: Referee = Referee.GRAPH) -> CheckResult:
    checks = [r for r in records if isinstance(r, Check)]
    if outcome.status != RunStatus.FINISHED:
        return CheckResult(len(checks), 0, float("inf"), False,
                           f"the check run did not finish: {outcome.message}", referee)
    if not checks:
        return CheckResult(0, 0, float("inf"), False, "no rank reported a check", referee)
    worst = max(checks, key=lambda c: c.worst)
    steps = len(checks[0].losses)
    if worst.worst <= TOLERANCE:
        return CheckResult(len(checks), steps, worst.worst, True, "equal", referee)
    return CheckResult(len(checks), steps, worst.worst, False,
                       f"rank {worst.rank} is {worst.worst:.1e} away from {referee} (loss "
                       f"{worst.loss_error:.1e}, parameters {worst.param_error:.1e}; "
                       f"tolerance {TOLERANCE:.0e})", referee)
