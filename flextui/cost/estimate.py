"""How long profiling takes, said before it starts and kept up to date while it runs.

Before: every task still to measure costs its warm-up runs, one run to size its samples
and its timed samples (``runs_per_sample`` runs each) at the analytic model's times on
the local device, plus a fixed set-up (operands built, kernels looked
up, the first runs' allocations). While it runs: the analytic time of the tasks left,
scaled by how the measured tasks' wall time compared with their analytic time so far.
Tasks differ by orders of magnitude (a 299x299 convolution and a reshape), so this
tracks a run far better than counting tasks, which is what makes a plain progress bar's
remaining time swing by hours.
"""

from __future__ import annotations

import math
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
#: a timed sample spans at least this long: small blocks run back to back between one
#: pair of events (``cost.profile``), at most ``MAX_RUNS`` times
SAMPLE_S = 1e-3
MAX_RUNS = 100


def runs_per_sample(one_run_s: float) -> int:
    """Runs back to back in a sample, so it spans ``SAMPLE_S`` (1 to ``MAX_RUNS``)."""
    return max(1, min(MAX_RUNS, math.ceil(SAMPLE_S / max(one_run_s, 1e-9))))


def measuring_s(run_s: float, *, warmup: int, repeats: int) -> float:
    """Seconds to measure a pass that takes ``run_s`` a run: warm-up, sizing, samples."""
    return (warmup + 1 + repeats * runs_per_sample(run_s)) * run_s


def task_estimates(signatures: Sequence[TaskSignature], cache: ProfileCache, device: Device,
                   *, warmup: int, repeats: int, training: bool) -> list[float]:
    """Seconds each task will take to measure (0 for the ones the cache has)."""
    analytic = AnalyticCostModel()
    estimates = []
    for signature in signatures:
        if cache.get(signature.key) is not None:
            estimates.append(0.0)
            continue
        cost = analytic.op_cost(signature.op, signature.block, device)
        passes = (cost.forward_s, cost.backward_s) if training else (cost.forward_s,)
        estimates.append(sum(measuring_s(s, warmup=warmup, repeats=repeats) for s in passes)
                         + TASK_SETUP_S)
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
