"""A rank's gradient sums and update: its replica groups' gradients summed over their
ranks in the plan's buckets (in place, or through a flat buffer scattered back after;
a sharded bucket reduce-scattered: ``sharded``), then the optimizer's step (SGD or
AdamW at the step's learning rate, after clipping the global gradient norm) on every
box this rank holds, element by element as torch's optimizer does it on the whole
parameter; a sharded parameter's groups are updated in parts.

The global gradient norm is every parameter element's gradient counted once: each rank
sums the squares of the cells it counts (``Plan.norm_cells``: a replicated element on
the lowest rank holding it; a sharded group's by the rank whose part they are), and one
all-reduce over all ranks adds them up.
"""

from __future__ import annotations

import torch

from flextui.graph import Region
from flextui.graph.region import within
from flextui.runtime.comm import Comm, PendingSums
from flextui.runtime.optimizer import Optimizer
from flextui.runtime.optimizer_steps import optimizer_step
from flextui.runtime.plan import Plan, ReplicaSync
from flextui.runtime.sharded import ShardedState

#: what torch.nn.utils.clip_grad_norm_ adds to the norm it divides by
CLIP_EPS = 1e-6

Bucket = tuple[ReplicaSync, ...]


class RankUpdate:
    """The optimizer's state of the parameter boxes ``params`` (by name, each the box
    ``boxes[name]``) of ``rank``: SGD's momentum buffer or AdamW's moving averages of each
    unsharded one (``moments``), the sharded ones' in ``sharded``; the updates made
    (AdamW's bias corrections count them); this step's buckets summed through a buffer."""

    def __init__(self, plan: Plan, rank: int, comm: Comm, params: dict[str, torch.Tensor],
                 boxes: dict[str, Region], optimizer: Optimizer) -> None:
        self.plan, self.rank, self.comm = plan, rank, comm
        self.params, self.boxes, self.optimizer = params, boxes, optimizer
        self.sharded = ShardedState(plan, rank, comm, params, boxes, optimizer.kind.states)
        self.moments = {name: [torch.zeros_like(p) for _ in range(optimizer.kind.states)]
                        for name, p in params.items() if name not in self.sharded.sharded}
        self.updates = 0
        self._flat: list[tuple[Bucket, torch.Tensor]] = []

    def start_sum(self, bucket: Bucket, pending: PendingSums) -> None:
        """Start summing a bucket of replica groups' gradients over their ranks: in place
        when it is one group whose one cell is the rank's whole box (data parallelism),
        else gathered into a buffer and scattered back when the sums are done."""
        first = bucket[0]
        if first.stage:
            self.sharded.start(bucket, self.grad, pending)
            return
        grad = self.grad(first.param)
        if len(bucket) == 1 and first.cells == (self.boxes[first.param],) \
                and grad.is_contiguous():
            self.comm.start_sum(first.ranks, grad.view(-1), pending)
            return
        flat = torch.cat([part.reshape(-1) for part in self._bucket_parts(bucket)])
        self._flat.append((bucket, flat))
        self.comm.start_sum(first.ranks, flat, pending)

    def finish_sums(self) -> None:
        """Scatter the sums gathered into buffers back into the gradients (once the
        pending sums are done)."""
        for bucket, flat in self._flat:
            at = 0
            for part in self._bucket_parts(bucket):
                part.copy_(flat[at:at + part.numel()].view_as(part))
                at += part.numel()
        self._flat.clear()

    def grad(self, name: str) -> torch.Tensor:
        param = self.params[name]
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        return param.grad

    def step(self, step: int) -> None:
        """The optimizer's step on every parameter box this rank holds, at step
        ``step``'s learning rate, as torch.optim.SGD or AdamW (single-tensor) does it."""
        opt = self.optimizer
        lr = opt.lr_at(step)
        self.updates += 1
        with torch.no_grad():
            if opt.grad_clip is not None:
                self._clip(opt.grad_clip)
            for name, moments in self.moments.items():
                optimizer_step(opt, self.params[name], self.grad(name), moments, lr,
                               self.updates)
            self.sharded.update(opt, lr, self.updates, self.grad)
            for param in self.params.values():
                param.grad = None

    def _bucket_parts(self, bucket: Bucket) -> list[torch.Tensor]:
        """The gradient cells a bucket sums, in order (views of the gradients)."""
        return [self.grad(s.param)[within(cell, self.boxes[s.param])]
                for s in bucket for cell in s.cells]

    def _clip(self, max_norm: float) -> None:
        """Scale every gradient by min(1, max_norm / (norm + 1e-6)), the norm over every
        parameter element of every rank (clip_grad_norm_'s)."""
        squares = torch.zeros((), dtype=self.sharded.dtype, device=self.comm.device)
        for name, box in self.boxes.items():
            grad = self.grad(name)
            for cell in self.plan.norm_cells[name].get(self.rank, ()):
                part = grad[within(cell, box)]
                squares += torch.sum(part * part)
        squares += self.sharded.squares()
        self.comm.sum_all(squares)
        scale = torch.clamp(max_norm / (squares.sqrt() + CLIP_EPS), max=1.0)
        for name in self.params:
            self.grad(name).mul_(scale)
        self.sharded.scale(scale)
