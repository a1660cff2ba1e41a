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

from flextui.graph.region import Region


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
    plan = replica_plan(tuple((b.region, b.device) for b in blocks))
    return [ReplicaGroup(devices, numel, tuple(sorted({blocks[i].task for i in users})))
            for devices, numel, users in plan]


def replica_plan(blocks: tuple[tuple[Region, int], ...],
                 ) -> list[tuple[tuple[int, ...], int, tuple[int, ...]]]:
    """``replica_groups`` on (region, device) pairs: for each group its devices, its
    elements and the indices of the blocks whose tasks produce its gradients. It depends
    on the blocks' regions and devices only, so callers may memoise it."""
    return [(devices, sum(math.prod(hi - lo for lo, hi in cell) for cell in cells), users)
            for devices, cells, users in replica_cells(blocks)]


def replica_cells(blocks: tuple[tuple[Region, int], ...],
                  ) -> list[tuple[tuple[int, ...], list[Region], tuple[int, ...]]]:
    """``replica_plan`` with each group's atoms (its cells, in a fixed order) instead of
    their element count: the runtime all-reduces exactly these elements."""
    rank = len(blocks[0][0])
    by_region: dict[tuple, tuple[set[int], set[int]]] = {}  # region -> (devices, blocks)
    for i, (region, device) in enumerate(blocks):
        held_on, by = by_region.setdefault(region, (set(), set()))
        held_on.add(device)
        by.add(i)
    regions = list(by_region.items())
    cuts = [sorted({r[d][0] for r, _ in regions} | {r[d][1] for r, _ in regions})
            for d in range(rank)]
    groups: dict[tuple[int, ...], tuple[list[Region], set[int]]] = {}
    for cell in itertools.product(*(list(itertools.pairwise(c)) for c in cuts)):
        devices: set[int] = set()
        users: set[int] = set()
        for region, (held_on, by) in regions:
            if all(lo >= r0 and hi <= r1 for (lo, hi), (r0, r1) in zip(cell, region)):
                devices |= held_on
                users |= by
        if not devices:
            continue
        cells, group_users = groups.setdefault(tuple(sorted(devices)), ([], set()))
        cells.append(cell)
        group_users |= users
    return [(devices, cells, tuple(sorted(users)))
            for devices, (cells, users) in sorted(groups.items())]
