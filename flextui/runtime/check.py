"""Whether a checked run (``Training.check``) equals one process: each rank's largest
relative errors, of its parameter shards and of every step's loss, within 1e-9 (the
run is in float64)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flextui.runtime.launch import Outcome, RunStatus

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


def check_result(outcome: Outcome, records: list[dict[str, Any]]) -> CheckResult:
    checks = [r for r in records if r.get("kind") == "check"]
    if outcome.status != RunStatus.FINISHED:
        return CheckResult(len(checks), 0, float("inf"), False,
                           f"the check run did not finish: {outcome.message}")
    if not checks:
        return CheckResult(0, 0, float("inf"), False, "no rank reported a check")
    worst = max(max(float(c["loss_error"]), float(c["param_error"])) for c in checks)
    steps = len(checks[0].get("losses", []))
    if worst <= TOLERANCE:
        return CheckResult(len(checks), steps, worst, True, "equal")
    rank = max(checks, key=lambda c: max(float(c["loss_error"]), float(c["param_error"])))
    return CheckResult(len(checks), steps, worst, False,
                       f"rank {rank['rank']} is {worst:.1e} away from one process (loss "
                       f"{float(rank['loss_error']):.1e}, parameters "
                       f"{float(rank['param_error']):.1e}; tolerance {TOLERANCE:.0e})")
