"""Whether a checked run (``Training.check``) equals its referee in one process (the
user's module, or the graph flextui built: ``referee``): each rank's largest relative
errors, of its parameter shards and of every step's loss, within 1e-9 (the run is in
float64). A strategy in bf16 is compared with the graph's one-process run in bf16 (its
parameters in float64), within 1e-3: partial sums rounded to bfloat16 in another order
differ by that much (measured: at most 1.0e-4 on the five small models under six
strategies, 3 steps on 2 ranks; the whole run in bf16 is itself 4e-5 to 1.2e-4 from the
run in float32, so the check shows a partitioning error, not the precision's). With
AdamW only the loss is judged in bf16: its normalised step turns a near-zero gradient's
rounding into a step of the learning rate's size, whatever its sign (an imported GPT-2
decoder's parameters differed by 1.1e-2 at the model's scale after 3 steps, its loss by
1.2e-4)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flextui.cost.optimizers import OptimizerKind
from flextui.graph import OpGraph
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Check, RankRecord
from flextui.strategy import Strategy
from flextui.strategy.precision import Precision

TOLERANCE = 1e-9
BF16_TOLERANCE = 1e-3


@dataclass(frozen=True)
class CheckRule:
    """How close a checked run must be: within ``tolerance``, its loss and (``params``)
    its parameters."""

    tolerance: float = TOLERANCE
    params: bool = True

    def error(self, check: Check) -> float:
        """What the rule judges of a rank's check (infinite when not a number)."""
        if not self.params:
            return math.inf if math.isnan(check.loss_error) else check.loss_error
        return check.worst

    @property
    def judged(self) -> str:
        return "loss and parameters" if self.params else "loss"


def check_rule(strategy: Strategy, optimizer: OptimizerKind) -> CheckRule:
    """The rule for a run of ``strategy`` with ``optimizer``: 1e-9 in float64; in bf16,
    1e-3, and with AdamW the loss alone."""
    if strategy.precision == Precision.FP32:
        return CheckRule()
    return CheckRule(BF16_TOLERANCE, params=optimizer != OptimizerKind.ADAMW)


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
    rule: CheckRule = CheckRule()

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "steps": self.steps, "worst_relative_error": self.worst,
                "tolerance": self.rule.tolerance, "judged": self.rule.judged,
                "equal": self.equal, "message": self.message,
                "referee": self.referee.name.lower()}


def check_result(outcome: Outcome, records: Iterable[RankRecord],
                 referee: Referee = Referee.GRAPH, rule: CheckRule = CheckRule()) -> CheckResult:
    checks = [r for r in records if isinstance(r, Check)]
    if outcome.status != RunStatus.FINISHED:
        return CheckResult(len(checks), 0, float("inf"), False,
                           f"the check run did not finish: {outcome.message}", referee, rule)
    if not checks:
        return CheckResult(0, 0, float("inf"), False, "no rank reported a check", referee,
                           rule)
    worst = max(checks, key=rule.error)
    error = rule.error(worst)
    steps = len(checks[0].losses)
    if error <= rule.tolerance:
        return CheckResult(len(checks), steps, error, True, "equal", referee, rule)
    return CheckResult(len(checks), steps, error, False,
                       f"rank {worst.rank} is {error:.1e} away from {referee} (loss "
                       f"{worst.loss_error:.1e}, parameters {worst.param_error:.1e}; "
                       f"tolerance {rule.tolerance:.0e} on the {rule.judged})", referee, rule)
