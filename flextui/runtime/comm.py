"""How ranks talk: the block intersections of a step with batched point-to-point
operations, and replica groups' gradients with all-reduces, through torch.distributed
(gloo between CPU processes, NCCL between GPUs). It counts the bytes it moves and the
time a rank waits on them, which is what the metrics report as communication.

Every process group a step needs is made at start-up, in one order on every rank (a
group per distinct set of ranks that all-reduces; ``new_group`` is collective). The
default group carries the point-to-point traffic only, so the all-reduces in flight
during the backward pass never share a group with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

#: the collectives into and out of one tensor (named ``*_single`` from torch 2.13, where
#: the older names warn that they are deprecated)
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class Traffic:
    """What a rank moved, how many gradient all-reduces (buckets) it started and how
    long it waited, since the last ``reset``."""

    sent: int = 0
    received: int = 0
    wait_s: float = 0.0
    sums: int = 0

    def reset(self) -> None:
        self.sent = self.received = self.sums = 0
        self.wait_s = 0.0


@dataclass
class Transfer:
    """One point-to-point operation: send ``tensor`` to ``peer``, or receive into it."""

    send: bool
    peer: int
    tensor: torch.Tensor


@dataclass
class PendingSums:
    """All-reduces in flight; ``wait`` blocks until every one is done."""

    works: list[dist.Work] = field(default_factory=list)


class Comm:
    """This rank's communication; ``groups`` are the rank sets that all-reduce."""

    def __init__(self, rank: int, groups: Sequence[tuple[int, ...]],
                 device: torch.device) -> None:
        self.rank, self.device = rank, device
        self.traffic = Traffic()
        self._groups = {ranks: dist.new_group(list(ranks)) for ranks in groups}
        self._synchronize = device.type == "cuda"
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()  # NCCL wants every rank in its first collective

    def exchange(self, transfers: list[Transfer]) -> None:
        """Post ``transfers`` as one batch (in the order given: every rank lists its
        pieces in the plan's order, so the operations of each pair of ranks match) and
        wait for them."""
        if not transfers:
            return
        ops = []
        for t in transfers:
            if t.send:
                ops.append(dist.P2POp(dist.isend, t.tensor, t.peer))
                self.traffic.sent += t.tensor.numel() * t.tensor.element_size()
            else:
                ops.append(dist.P2POp(dist.irecv, t.tensor, t.peer))
                self.traffic.received += t.tensor.numel() * t.tensor.element_size()
        started = time.perf_counter()
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        if self._synchronize:
            torch.cuda.synchronize(self.device)
        self.traffic.wait_s += time.perf_counter() - started

    def start_sum(self, ranks: tuple[int, ...], flat: torch.Tensor, pending: PendingSums) -> None:
        """Start summing ``flat`` over ``ranks`` in place."""
        nbytes = flat.numel() * flat.element_size()
        self.traffic.sent += nbytes
        self.traffic.received += nbytes
        self.traffic.sums += 1
        pending.works.append(dist.all_reduce(flat, group=self._groups[ranks], async_op=True))

    def start_reduce_scatter(self, ranks: tuple[int, ...], out: torch.Tensor,
                             flat: torch.Tensor, nbytes: int, pending: PendingSums) -> None:
        """Start summing ``flat`` over ``ranks``, this rank's part into ``out`` (a sharded
        bucket of ``nbytes``: counted as its all-reduce would be, and its all-gather
        not again, as the simulator's one sync task of the bucket counts them)."""
        self.traffic.sent += nbytes
        self.traffic.received += nbytes
        self.traffic.sums += 1
        pending.works.append(_reduce_scatter(out, flat, group=self._groups[ranks],
                                             async_op=True))

    def gather(self, ranks: tuple[int, ...], out: torch.Tensor, part: torch.Tensor,
               nbytes: int = 0) -> None:
        """Gather every rank's ``part`` of ``ranks`` into ``out``, in rank order, now;
        counted as ``nbytes`` each way (a stage-3 parameter's group: its bytes, as the
        simulator's gather task moves them; 0: folded into its reduce-scatter's count)."""
        self.traffic.sent += nbytes
        self.traffic.received += nbytes
        started = time.perf_counter()
        _all_gather(out, part, group=self._groups[ranks])
        if self._synchronize:
            torch.cuda.synchronize(self.device)
        self.traffic.wait_s += time.perf_counter() - started

    def sum_all(self, value: torch.Tensor) -> None:
        """Sum ``value`` over every rank in place, now (the default group: nothing else
        is in flight when it is called); alone, it is the sum."""
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return
        nbytes = value.numel() * value.element_size()
        self.traffic.sent += nbytes
        self.traffic.received += nbytes
        started = time.perf_counter()
        dist.all_reduce(value)
        if self._synchronize:
            torch.cuda.synchronize(self.device)
        self.traffic.wait_s += time.perf_counter() - started

    def wait(self, pending: PendingSums) -> None:
        started = time.perf_counter()
        for work in pending.works:
            work.wait()
        if self._synchronize:
            torch.cuda.synchronize(self.device)
        pending.works.clear()
        self.traffic.wait_s += time.perf_counter() - started
