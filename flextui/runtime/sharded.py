"""A rank's sharded training state (``strategy.shards``, ZeRO's stages): the gradients of
a sharded bucket are reduce-scattered, so the rank gets the sum of its part alone; it
updates that part of the parameters with that part's optimizer state, then (stages 1
and 2) an all-gather gives every rank of the group every updated element.

A bucket (``Plan.buckets``: groups of one rank set and one stage) is one flat vector of
its groups' cells in order, padded with zeros to a multiple of the group's size ``n``;
rank ``i`` of the group owns elements ``[i * c, (i + 1) * c)``, ``c = ceil(len / n)``
(``strategy.shards.shard_numel``: what the simulator counts). The padding's gradient
and value are zero, and stay zero under SGD and AdamW. The cells of a sharded parameter
that no other rank holds are updated cell by cell with state of their own. The update
is element by element as for an unsharded parameter, so the result is the same to
rounding (the gradients' sums in another order).

Stage 3 (a parameter one op uses; each of its groups a bucket of its own): the rank's
part of each group is all it keeps of the parameter between uses (``parts``). Before
the op's forward tasks and again before its backward tasks, ``gather_param`` all-gathers
the parts into the rank's box of the parameter; ``release_param`` frees the box's
storage once the tasks are done (a box that also holds cells the rank alone holds is
kept: those cells live nowhere else). The box is written through ``.data``, so the
autograd graph of the forward pass, which saved views of the box, reads the values
gathered again in its backward pass (what FSDP does with its flat parameters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from flextui.graph import Region
from flextui.graph.region import region_shape, within
from flextui.runtime.comm import Comm, PendingSums
from flextui.runtime.optimizer import Optimizer
from flextui.runtime.optimizer_steps import optimizer_step
from flextui.runtime.plan import Plan, ReplicaSync
from flextui.strategy.shards import ShardStage, shard_numel

Bucket = tuple[ReplicaSync, ...]


class ShardedState:
    """The optimizer's state of this rank's parts of sharded buckets and of sharded
    parameters' cells it alone holds, and each step's reduced parts of the gradients."""

    def __init__(self, plan: Plan, rank: int, comm: Comm, params: dict[str, torch.Tensor],
                 boxes: dict[str, Region], states: int) -> None:
        self.rank, self.comm, self.params, self.boxes = rank, comm, params, boxes
        self.buckets = [b for b in plan.buckets if rank in b[0].ranks and b[0].stage]
        #: each sharded bucket's index, and its length and the part's length
        self.index = {bucket: b for b, bucket in enumerate(self.buckets)}
        lengths = [sum(s.numel for s in b) for b in self.buckets]
        self.sizes = [(length, shard_numel(length, len(b[0].ranks)))
                      for length, b in zip(lengths, self.buckets)]
        like = next(iter(params.values()), None)
        self.dtype = dtype = like.dtype if like is not None else torch.float32
        device = like.device if like is not None else comm.device
        self.moments = [[torch.zeros(part, dtype=dtype, device=device) for _ in range(states)]
                        for _, part in self.sizes]
        self.alone = [(name, cell) for name, per_rank in plan.alone_cells.items()
                      for cell in per_rank.get(rank, ())]
        self.cell_moments = [[torch.zeros(region_shape(cell), dtype=dtype, device=device)
                              for _ in range(states)] for _, cell in self.alone]
        alone = {name for name, _ in self.alone}
        self.sharded = {s.param for b in self.buckets for s in b} | alone
        #: this step's reduced gradient part of each sharded bucket, by its index
        self.grads: dict[int, torch.Tensor] = {}
        #: this step's updated part of each sharded bucket at stage 1 or 2
        self.updated: dict[int, torch.Tensor] = {}
        #: stage 3: this rank's part of each such bucket (all it keeps between uses), and
        #: the buckets of each such parameter, in the order every rank gathers them
        self.parts = {b: self._part(b) for b, bucket in enumerate(self.buckets)
                      if bucket[0].stage == ShardStage.PARAMETERS}
        self.gathered_by: dict[str, list[int]] = {}
        for b in self.parts:
            self.gathered_by.setdefault(self.buckets[b][0].param, []).append(b)
        #: the stage-3 parameters whose box is freed between uses
        self.freed = {name for name in self.gathered_by if name not in alone}
        for name in self.freed:
            self.release_param(name)

    def start(self, bucket: Bucket, grad: Callable[[str], torch.Tensor],
              pending: PendingSums) -> None:
        """Start the reduce-scatter of ``bucket``'s gradients into this rank's part."""
        b = self.index[bucket]
        length, part = self.sizes[b]
        ranks = bucket[0].ranks
        flat = torch.cat([grad(s.param)[within(cell, self.boxes[s.param])].reshape(-1)
                          for s in bucket for cell in s.cells])
        padded = torch.nn.functional.pad(flat, (0, part * len(ranks) - length))
        self.grads[b] = out = torch.empty(part, dtype=flat.dtype, device=flat.device)
        self.comm.start_reduce_scatter(ranks, out, padded, sum(s.nbytes for s in bucket),
                                       pending)

    def squares(self) -> torch.Tensor:
        """The sum of the squares of this rank's parts of the reduced gradients (the
        padding adds 0): what it counts in the global norm for its sharded groups (the
        cells it alone holds are in ``Plan.norm_cells``)."""
        return sum((torch.sum(g * g) for g in self.grads.values()),
                   torch.zeros((), dtype=self.dtype, device=self.comm.device))

    def scale(self, factor: torch.Tensor) -> None:
        """Scale the reduced parts (clipping; the cells alone are the gradients')."""
        for g in self.grads.values():
            g.mul_(factor)

    def update(self, opt: Optimizer, lr: float, t: int, grad: Callable[[str], torch.Tensor],
               ) -> None:
        """The optimizer's step on this rank's parts and its cells alone (no_grad)."""
        for b in range(len(self.buckets)):
            mine = self.parts.get(b)
            if mine is None:
                self.updated[b] = mine = self._part(b)
            optimizer_step(opt, mine, self.grads.pop(b), self.moments[b], lr, t)
        for (name, cell), moments in zip(self.alone, self.cell_moments):
            optimizer_step(opt, self._value(name, cell),
                           grad(name)[within(cell, self.boxes[name])], moments, lr, t)

    def gather(self) -> None:
        """All-gather the updated parts of the stage 1 and 2 buckets into the parameters
        (no_grad)."""
        for b in sorted(self.updated):
            self._gather(b, self.updated.pop(b), counted=False)

    def gather_param(self, name: str) -> None:
        """Stage 3: all-gather ``name``'s groups this rank is in into its box (before its
        op's tasks use it; every rank of each group calls it there)."""
        if name not in self.gathered_by:
            return
        box = self.params[name]
        storage = box.untyped_storage()
        if storage.size() == 0:
            storage.resize_(box.numel() * box.element_size())
        for b in self.gathered_by[name]:
            self._gather(b, self.parts[b], counted=True)

    def release_param(self, name: str) -> None:
        """Stage 3: free ``name``'s box, if the rank keeps nothing but parts of it."""
        if name in self.freed:
            self.params[name].untyped_storage().resize_(0)

    @contextlib.contextmanager
    def whole(self) -> Iterator[None]:
        """Stage 3: every parameter's box gathered while the block runs (a checkpoint,
        a check; every rank enters it together), and the parts taken from the boxes
        after it (a checkpoint's load may have changed them)."""
        with torch.no_grad():
            for name in self.gathered_by:
                self.gather_param(name)
        yield
        with torch.no_grad():
            for b in self.parts:
                self.parts[b].copy_(self._part(b))
            for name in self.gathered_by:
                self.release_param(name)

    def _part(self, b: int) -> torch.Tensor:
        """This rank's part of bucket ``b`` as the boxes hold it now (a copy, padded)."""
        bucket = self.buckets[b]
        part = self.sizes[b][1]
        i = bucket[0].ranks.index(self.rank)
        flat = torch.cat([self._value(s.param, cell).detach().reshape(-1)
                          for s in bucket for cell in s.cells])[i * part:(i + 1) * part]
        return torch.nn.functional.pad(flat, (0, part - len(flat)))

    def _gather(self, b: int, mine: torch.Tensor, counted: bool) -> None:
        """All-gather bucket ``b``'s parts (this rank's ``mine``) into the parameters'
        cells, written through ``.data`` (not an autograd-visible change)."""
        bucket = self.buckets[b]
        ranks = bucket[0].ranks
        whole = torch.empty(len(mine) * len(ranks), dtype=mine.dtype, device=mine.device)
        self.comm.gather(ranks, whole, mine, sum(s.nbytes for s in bucket) if counted else 0)
        at = 0
        for s in bucket:
            for cell in s.cells:
                value = self._value(s.param, cell)
                value.data.copy_(whole[at:at + value.numel()].view_as(value))
                at += value.numel()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The optimizer's state this object owns, by a stable key (a checkpoint's)."""
        out = {}
        for b, moments in enumerate(self.moments):
            for j, m in enumerate(moments):
                out[f"bucket{b}/moment{j}"] = m
        for c, moments in enumerate(self.cell_moments):
            for j, m in enumerate(moments):
                out[f"cell{c}/moment{j}"] = m
        return out

    def _value(self, name: str, cell: Region) -> torch.Tensor:
        return self.params[name][within(cell, self.boxes[name])]

