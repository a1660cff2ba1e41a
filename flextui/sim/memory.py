"""Per-device memory of a simulated iteration, and what exceeding it costs.

Memory on a device = its parameter shards, and in training their gradients and one
optimizer state (SGD momentum), + the activations kept for backward (every forward
task's outputs and every input block received from another device; in inference too,
an upper bound) + the largest workspace of any of its tasks.

Over capacity, a strategy is penalised (FlexFlow's rule: +1 ms per MB over, summed
over devices) or rejected (infinite cost), by the simulator's ``memory`` option.
"""

from __future__ import annotations

from dataclasses import dataclass

from flextui.sim.taskgraph import TaskGraph, TaskKind

PENALTY_S_PER_MB = 1e-3
MEMORY_POLICIES = ("penalize", "reject", "ignore")


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


def memory_usage(tg: TaskGraph) -> list[MemoryUsage]:
    n = tg.num_devices
    params, activations, workspace = [0] * n, [0] * n, [0] * n
    for shards in tg.param_shards.values():
        for d, nbytes in shards.items():
            params[d] += nbytes
    kind, resources, nbytes, succs = tg.kind, tg.resources, tg.nbytes, tg.succs
    for t in tg.live_ids():
        if kind[t] == TaskKind.FORWARD:
            d = resources[t][0]
            activations[d] += nbytes[t]
            workspace[d] = max(workspace[d], tg.workspace[t])
        elif kind[t] == TaskKind.TRANSFER and succs[t] and kind[succs[t][0]] == TaskKind.FORWARD:
            activations[resources[succs[t][0]][0]] += nbytes[t]  # the last hop of an input
    state = 1 if tg.training else 0
    return [MemoryUsage(params[d], params[d] * state, params[d] * state, activations[d],
                        workspace[d], tg.cluster.device(d).spec.memory_bytes) for d in range(n)]


def memory_penalty_s(usage: list[MemoryUsage], policy: str) -> float:
    over = sum(u.over for u in usage)
    if policy == "ignore" or over == 0:
        return 0.0
    if policy == "reject":
        return float("inf")
    return over / 1e6 * PENALTY_S_PER_MB
