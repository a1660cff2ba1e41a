"""Per-device memory of a simulated iteration, and what exceeding it costs.

Memory on a device = its parameter shards, and in training their gradients and the
optimizer's state (SGD's momentum, one tensor of the shard's size; AdamW's two moving
averages, two) -- of a sharded parameter's replica group only its part of them
(``strategy.shards``), + the activations kept for backward (every forward
task's outputs, but a recomputed op's, and every input block received from another
device; in inference too, an upper bound) + the largest workspace of any of its tasks.
A parameter at shard stage 3 counts its part on each device, and the groups its op
gathers count in that op's workspace (held while the op's tasks run).

Over capacity, a strategy is penalised (FlexFlow's rule: +1 ms per MB over, summed
over devices) or rejected (infinite cost), by the simulator's ``memory`` option (a
:class:`MemoryPolicy`).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from flextui.cost.optimizers import OptimizerKind
from flextui.sim.taskgraph import TaskGraph
from flextui.sim.unit_plan import Shards

PENALTY_S_PER_MB = 1e-3


class MemoryPolicy(StrEnum):
    """What a strategy over a device's memory costs."""

    PENALIZE = "penalize"   # FlexFlow's rule: +1 ms per MB over, summed over devices
    REJECT = "reject"       # infinite cost
    IGNORE = "ignore"       # nothing



@dataclass(frozen=True)
class MemoryUsage:
    parameters: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int
    capacity: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.workspace

    @property
    def over(self) -> int:
        return max(0, self.total - self.capacity)


class MemoryTracker:
    """Per-device memory, kept up to date as tasks and parameter shards change."""

    def __init__(self, tg: TaskGraph, optimizer: OptimizerKind = OptimizerKind.SGD) -> None:
        self.tg = tg
        self.optimizer_states = optimizer.states
        n = tg.num_devices
        self.params = [0] * n
        self.grads = [0] * n
        self.states = [0] * n
        self.activations = array("q", bytes(8 * n))
        self.workspaces: list[Counter] = [Counter() for _ in range(n)]
        for shards in tg.param_shards.values():
            self.shards(None, shards)
        self.tasks(tg.live_ids(), +1)

    def tasks(self, ids: Sequence[int], sign: int) -> None:
        """Add (sign +1) or remove (-1) what the tasks ``ids`` hold."""
        for d, workspace, count in self.tg.store.account(ids, sign, self.activations):
            self.workspaces[d][workspace] += count

    def shards(self, old: Shards | None, new: Shards | None) -> None:
        for shards, sign in ((old, -1), (new, +1)):
            if shards is not None:
                for d, nbytes, grads, states in zip(shards.devices, shards.nbytes,
                                                    shards.grads, shards.states):
                    self.params[d] += sign * nbytes
                    self.grads[d] += sign * grads
                    self.states[d] += sign * states

    def usage(self) -> list[MemoryUsage]:
        state = 1 if self.tg.training else 0
        kept = state * self.optimizer_states
        return [MemoryUsage(p, self.grads[d] * state, self.states[d] * kept,
                            self.activations[d],
                            max((w for w, c in self.workspaces[d].items() if c > 0), default=0),
                            self.tg.cluster.device(d).spec.memory_bytes)
                for d, p in enumerate(self.params)]


def memory_usage(tg: TaskGraph, optimizer: OptimizerKind = OptimizerKind.SGD
                 ) -> list[MemoryUsage]:
    return MemoryTracker(tg, optimizer).usage()


def memory_penalty_s(usage: list[MemoryUsage], policy: MemoryPolicy) -> float:
    over = sum(u.over for u in usage)
    if policy == MemoryPolicy.IGNORE or over == 0:
        return 0.0
    if policy == MemoryPolicy.REJECT:
        return float("inf")
    return over / 1e6 * PENALTY_S_PER_MB
