"""Which devices hold replicas of which parts of a parameter.

Ops that share a parameter (the unrolled steps of an LSTM layer) may split it
differently, so a parameter is cut into *atoms*: the cells of the common refinement of
every task's parameter block. Atoms held by the same set of devices form one replica
group; a group spread over more than one device needs its gradients all-reduced.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ParamBlock:
    """One task's use of a parameter: the block it reads, its device, its task id."""

    region: tuple[tuple[int, int], ...]
    device: int
    task: int


@dataclass(frozen=True)
class ReplicaGroup:
    devices: tuple[int, ...]
    numel: int                 # elements of the parameter in this group
    tasks: tuple[int, ...]     # the tasks (backward) that produce these gradients


def replica_groups(blocks: list[ParamBlock]) -> list[ReplicaGroup]:
    """Group the atoms of a parameter by the set of devices that hold them, in a
    deterministic order (by device set)."""
    rank = len(blocks[0].region)
    by_region: dict[tuple, tuple[set[int], set[int]]] = {}  # region -> (devices, tasks)
    for b in blocks:
        devices, tasks = by_region.setdefault(b.region, (set(), set()))
        devices.add(b.device)
        tasks.add(b.task)
    regions = list(by_region.items())
    cuts = [sorted({r[d][0] for r, _ in regions} | {r[d][1] for r, _ in regions})
            for d in range(rank)]
    groups: dict[tuple[int, ...], tuple[int, set[int]]] = {}
    for cell in itertools.product(*(list(zip(c, c[1:])) for c in cuts)):
        devices: set[int] = set()
        tasks: set[int] = set()
        for region, (held_on, by) in regions:
            if all(lo >= r0 and hi <= r1 for (lo, hi), (r0, r1) in zip(cell, region)):
                devices |= held_on
                tasks |= by
        if not devices:
            continue
        key = tuple(sorted(devices))
        numel, group_tasks = groups.get(key, (0, set()))
        group_tasks |= tasks
        groups[key] = (numel + math.prod(hi - lo for lo, hi in cell), group_tasks)
    return [ReplicaGroup(devices, numel, tuple(sorted(tasks)))
            for devices, (numel, tasks) in sorted(groups.items())]
