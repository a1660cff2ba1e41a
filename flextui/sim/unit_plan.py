"""What the task store builds a parameter's syncs and updates from (``ParamPlan``), and
the one plan of a *unit*: parameters whose gradients share buckets (``buckets``).

A unit's plan has an all-reduce per bucket, after every gradient in it and of all its
bytes (a bucket of one group keeps the group's time), then the groups held by one
device as they are (they need no all-reduce), and per device one update of all its
shards, taking the sum of the parameters' update times there.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from flextui.sim.buckets import bucket_starts


@dataclass(frozen=True)
class Shards:
    """The bytes of a parameter each device holds (``devices`` ascending), and of them
    (in training) the bytes whose gradient it keeps and whose optimizer state it keeps
    and updates: all it holds, or a part of each sharded replica group's
    (``strategy.shards``)."""

    devices: array   # 'i'
    nbytes: array    # 'q'
    grads: array     # 'q'
    states: array    # 'q'


@dataclass(frozen=True)
class ParamPlan:
    """Replica group ``g``: devices ``gdevices[gdevs[g]..gdevs[g+1]]``, gradients from
    the blocks ``gblockids[gblocks[g]..gblocks[g+1]]`` of the users' tasks; held by more
    than one device, an all-reduce of ``gnbytes[g]`` over ``grsets[g]`` taking
    ``gdurations[g]`` (at shard stage 3, a reduce-scatter). Then an update per device of
    ``shards``, taking ``udurations``. ``syncs``: per group that is all-reduced, in
    order, (an id of its device set and stage, None for a group summed alone; its
    bytes), what buckets are decided from. ``gathers[g]``: at stage 3, the seconds of
    the all-gather of group ``g`` before each pass of the parameter's op (0 else)."""

    gdevs: array
    gdevices: array
    gblocks: array
    gblockids: array
    grsets: array
    gdurations: array
    gnbytes: array
    shards: Shards
    udurations: array
    syncs: tuple[tuple[int | None, int], ...]
    gathers: array   # 'd'


@dataclass
class _Group:
    """A group of the unit's plan being made: a bucket, or a group on one device."""

    devices: array
    ring: int                  # the resource set of its all-reduce; -1 on one device
    blocks: array              # block ids, into the unit's producers
    nbytes: int
    seconds: float | None      # its all-reduce's time while it is one group
    members: list[int] = field(default_factory=list)   # plans with a group in it


def merge_unit(plans: list[ParamPlan], blocks: list[int], limit: int,
               allreduce_s: Callable[[int, tuple[int, ...]], float],
               ) -> tuple[ParamPlan, list[list[int]]]:
    """The plan of the unit of ``plans`` (in ``sync_order``, each parameter's producers
    ``blocks[i]`` long, concatenated in this order), its buckets of up to ``limit``
    bytes timed by ``allreduce_s(nbytes, devices)``; with it, per bucket, the indices of
    the plans with a group in it."""
    starts = iter(bucket_starts((s for plan in plans for s in plan.syncs), limit))
    buckets: list[_Group] = []
    alone: list[_Group] = []
    offset = 0
    for i, (plan, count) in enumerate(zip(plans, blocks)):
        for g in range(len(plan.gnbytes)):
            ids = array("i", [offset + b for b in
                              plan.gblockids[plan.gblocks[g]:plan.gblocks[g + 1]]])
            group = _Group(plan.gdevices[plan.gdevs[g]:plan.gdevs[g + 1]], plan.grsets[g], ids,
                           plan.gnbytes[g], plan.gdurations[g], [i])
            if group.ring < 0:
                alone.append(group)
            elif next(starts):
                buckets.append(group)
            else:
                bucket = buckets[-1]
                bucket.blocks.extend(ids)
                bucket.nbytes += group.nbytes
                bucket.seconds = None
                if bucket.members[-1] != i:
                    bucket.members.append(i)
        offset += count
    gdevs, gdevices, gblocks, gblockids = array("i", [0]), array("i"), array("i", [0]), \
        array("i")
    grsets, gdurations, gnbytes = array("i"), array("d"), array("q")
    for group in buckets + alone:
        gdevices.extend(group.devices)
        gdevs.append(len(gdevices))
        gblockids.extend(group.blocks)
        gblocks.append(len(gblockids))
        grsets.append(group.ring)
        gdurations.append(group.seconds if group.seconds is not None else
                          allreduce_s(group.nbytes, tuple(group.devices)))
        gnbytes.append(group.nbytes)
    held: dict[int, list[int]] = {}   # device -> [bytes, gradient bytes, state bytes]
    seconds: dict[int, float] = {}
    for plan in plans:
        shards = plan.shards
        for d, nbytes, grads, states, s in zip(shards.devices, shards.nbytes, shards.grads,
                                               shards.states, plan.udurations):
            sums = held.setdefault(d, [0, 0, 0])
            sums[0] += nbytes
            sums[1] += grads
            sums[2] += states
            seconds[d] = seconds.get(d, 0.0) + s
    # a parameter at stage 3 is a unit of its own (its groups are summed alone)
    merged = ParamPlan(gdevs, gdevices, gblocks, gblockids, grsets, gdurations, gnbytes,
                       shards_of(held), array("d", [seconds[d] for d in sorted(held)]), (),
                       array("d", bytes(8 * len(gnbytes))))
    return merged, [bucket.members for bucket in buckets]


def shards_of(held: dict[int, list[int]]) -> Shards:
    """The Shards of ``held``: per device, [bytes, gradient bytes, state bytes]."""
    devices = sorted(held)
    return Shards(array("i", devices), *(array("q", [held[d][i] for d in devices])
                                         for i in range(3)))
