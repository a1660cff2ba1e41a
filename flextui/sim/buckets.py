"""Gradient buckets: which replica groups' gradients one all-reduce sums, decided by one
function for the runtime (``runtime.plan``) and the simulator (``taskgraph``), so the
collectives a rank issues are the ones its timeline shows.

An all-reduce costs a call and a latency whatever its size, so, as DDP does, small
gradients are summed together. Every rank issues its replica groups' all-reduces in
one order (``sync_order``: the parameters whose last user in the backward pass comes
first, then each parameter's groups by device set); a run of consecutive groups of one
rank set, each under the limit, goes into one bucket until the next would take it over
the limit. A bucket's all-reduce starts when the last of its gradients is ready.

The limit is DDP's default on GPUs (25 MiB) and 1 MiB on CPU ranks, where gloo's
all-reduce of 1 MiB already takes milliseconds and a larger bucket waits longer for its
last gradient.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

from flextui.graph import Op
from flextui.machine import Cluster

#: the most bytes one all-reduce sums on CPU ranks, and on GPUs (DDP's bucket_cap_mb)
CPU_BUCKET_BYTES = 1 << 20
GPU_BUCKET_BYTES = 25 << 20


def bucket_limit(on_cpu: bool) -> int:
    """The bucket size limit of ranks on CPUs (``on_cpu``) or on GPUs."""
    return CPU_BUCKET_BYTES if on_cpu else GPU_BUCKET_BYTES


def cluster_bucket_limit(cluster: Cluster) -> int:
    """The bucket size limit of ranks on ``cluster``'s devices (the GPUs' if it mixes)."""
    return bucket_limit(all(d.spec.is_cpu for d in cluster.devices))


def sync_order(users: Mapping[str, Sequence[tuple[Op, int]]]) -> list[str]:
    """The parameters in the order ranks sum their gradients: the one whose first user
    (in topological order; its last in the backward pass) comes latest first, ties in
    the order of ``users`` (parameters by first use, as a graph's ops list them)."""
    first_user = {name: min(op.index for op, _ in used_by) for name, used_by in users.items()}
    return sorted(users, key=lambda name: -first_user[name])


def bucket_starts(syncs: Iterable[tuple[Hashable, int]], limit: int) -> list[bool]:
    """For each replica group's all-reduce in issue order, given as (its rank set, or
    anything equal exactly for equal rank sets; None for a group summed alone, as a
    parameter's at shard stage 3 is: its sum is what its devices keep; its bytes),
    whether it starts a new bucket (True) or joins the one before."""
    starts: list[bool] = []
    open_ranks: Hashable | None = None   # the rank set of a bucket still filling
    filled = 0
    for ranks, nbytes in syncs:
        small = nbytes < limit and ranks is not None
        joins = small and ranks == open_ranks and filled + nbytes <= limit
        starts.append(not joins)
        filled = filled + nbytes if joins else nbytes
        open_ranks = ranks if small else None
    return starts


def bucket_units(params: Iterable[tuple[str, Sequence[tuple[Hashable, int]]]], limit: int,
                 ) -> list[tuple[str, ...]]:
    """The parameters (given in ``sync_order`` with their all-reduces, as for
    ``bucket_starts``) cut into *units*: the runs whose gradients share buckets. A unit
    begins where a parameter's first all-reduce starts a bucket, so the buckets inside
    a unit follow from its own parameters alone; a parameter with no all-reduce is a
    unit of its own."""
    params = list(params)
    starts = iter(bucket_starts((sync for _, syncs in params for sync in syncs), limit))
    units: list[list[str]] = []
    open_unit: list[str] | None = None   # the unit whose last bucket may still fill
    for name, syncs in params:
        if not syncs:
            units.append([name])
            continue
        begins = next(starts)
        for _ in syncs[1:]:   # the rest start buckets inside the unit, or join one
            next(starts)
        if begins or open_unit is None:
            open_unit = [name]
            units.append(open_unit)
        else:
            open_unit.append(name)
    return [tuple(unit) for unit in units]
