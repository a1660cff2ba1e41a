"""Whether a checked run (``Training.check``) equals one process: each rank's largest
relative errors, of its parameter shards and of every step's loss, within 1e-9 (the
run is in float64)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Check, RankRecord

TOLERANCE = 1e-9


@dataclass(frozen=True)
class CheckResult:
    ranks: int
    steps: int
    worst: float
    equal: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "steps": self.steps, "worst_relative_error": self.worst,
                "tolerance": TOLERANCE, "equal": self.equal, "message": self.message}


def check_result(outcome: Outcome, records: Iterable[RankRecord]) -> CheckResult:
    checks = [r for r in records if isinstance(r, Check)]
    if outcome.status != RunStatus.FINISHED:
        return CheckResult(len(checks), 0, float("inf"), False,
                           f"the check run did not finish: {outcome.message}")
    if not checks:
        return CheckResult(0, 0, float("inf"), False, "no rank reported a check")
    worst = max(checks, key=lambda c: c.worst)
    steps = len(checks[0].losses)
    if worst.worst <= TOLERANCE:
        return CheckResult(len(checks), steps, worst.worst, True, "equal")
    return CheckResult(len(checks), steps, worst.worst, False,
                       f"rank {worst.rank} is {worst.worst:.1e} away from one process (loss "
                       f"{worst.loss_error:.1e}, parameters {worst.param_error:.1e}; "
                       f"tolerance {TOLERANCE:.0e})")
