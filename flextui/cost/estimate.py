"""How long profiling takes, said before it starts and kept up to date while it runs.

Before: every task still to measure costs its timed and warm-up runs at the analytic
model's times on the local device, plus a fixed set-up (operands built, kernels looked
up, the first runs' allocations). While it runs: the analytic time of the tasks left,
scaled by how the measured tasks' wall time compared with their analytic time so far.
Tasks differ by orders of magnitude (a 299x299 convolution and a reshape), so this
tracks a run far better than counting tasks, which is what makes a plain progress bar's
remaining time swing by hours.
"""

from __future__ import annotations

from collections.abc import Sequence

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.cache import ProfileCache
from flextui.cost.signatures import TaskSignature
from flextui.machine import Device

#: per task measured, beyond its runs: set-up and first-run costs (about 40-70 ms a
#: task on a 2-core CPU for AlexNet's tasks: a profile's wall time less its runs)
TASK_SETUP_S = 0.05
#: a profile estimated to take longer than this is announced with how to shorten it
LONG_PROFILE_S = 600.0


def task_estimates(signatures: Sequence[TaskSignature], cache: ProfileCache, device: Device,
                   *, warmup: int, repeats: int, training: bool) -> list[float]:
    """Seconds each task will take to measure (0 for the ones the cache has)."""
    analytic = AnalyticCostModel()
    runs = warmup + repeats
    estimates = []
    for signature in signatures:
        if cache.get(signature.key) is not None:
            estimates.append(0.0)
            continue
        cost = analytic.op_cost(signature.op, signature.block, device)
        per_run = cost.forward_s + (cost.backward_s if training else 0.0)
        estimates.append(runs * per_run + TASK_SETUP_S)
    return estimates


class ProfileClock:
    """The time left of a profile run, from the tasks' estimates and what the tasks done
    so far took. Feed it every task in order (:meth:`task_done`)."""

    def __init__(self, estimates: Sequence[float]) -> None:
        self._estimates = list(estimates)
        self._left = sum(self._estimates)
        self._estimated_done = 0.0
        self._ratio = 1.0

    @property
    def tasks(self) -> int:
        return len(self._estimates)

    @property
    def total_s(self) -> float:
        """The estimate before any task ran."""
        return sum(self._estimates)

    def task_done(self, index: int, elapsed_s: float) -> None:
        """Task ``index`` (0-based) is done, ``elapsed_s`` after the run started."""
        estimate = self._estimates[index]
        self._left -= estimate
        self._estimated_done += estimate
        if self._estimated_done > 0:
            self._ratio = elapsed_s / self._estimated_done

    @property
    def remaining_s(self) -> float:
        return max(0.0, self._left * self._ratio)


def duration(seconds: float) -> str:
    """``"about 20 h"``, ``"about 12 min"``, ``"under a minute"``: how long, for people."""
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h" if seconds < 36000 else f"about {seconds / 3600:.0f} h"
