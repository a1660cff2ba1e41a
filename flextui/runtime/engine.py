"""One rank's training step: forward in topological order, backward in reverse, every
task through its block kernel (``graph.kernels``, the kernels the profiler times), the
plan's pieces moved between ranks, replica groups' gradients summed and the update made
(``rank_update``); a parameter at stage 3 (``sharded``) is gathered before its op's
forward tasks and again before its backward tasks (after the op's pieces have moved, as
the simulator's gather task waits for them) and freed after them.

State. A parameter lives on a rank as one leaf tensor, the box of the parameter that
holds every shard the rank's tasks use (``Plan.param_boxes``); a task reads its shard as
a view of it, so autograd sums the gradients of the rank's tasks into the box. A task's
input block is a leaf too, assembled from its pieces (a local producer's output block
is taken as it is when it is exactly the input block), so each task's backward is an
autograd pass of its own, and the gradient of each piece goes back to its producer.

Recomputation. A recomputed op's forward tasks run without autograd; its outputs are
dropped once its last consumer has read them, and each backward task runs the block
kernel again (the same kernel seed: the same dropout) before its backward pass, as
``torch.utils.checkpoint`` does: a recomputed task keeps no input block that is a
recomputed task's output on this rank, and makes it again by re-running that task (kept,
with autograd, for its own backward), so a chain of recomputed tasks holds only the
first input it kept.

Micro-batches. With ``strategy.pipeline`` on, the step walks every micro-batch's
passes in the schedule's order (``walk``), each micro-batch with its own state (its
blocks' values between its passes); a task's kernel and data read the micro-batch's
samples (``Plan.region_at``), while the pieces, the same in every micro-batch, are cut
and assembled in the first one's coordinates (``Plan.region``). The gradients of every
micro-batch accumulate in the boxes; a bucket's sum starts once every micro-batch's
backward pass has run through its parameters' ops. A stage-3
parameter is gathered before each pass of each micro-batch.

Task times. With ``record_tasks`` a step also reports the compute time of each task
(``StepResult.task_s``: per op, block shape and pass, the seconds of this rank's tasks
of that kind), which ``flextui launch --record-profile`` writes into the profile cache.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from flextui.graph import Op, Region
from flextui.graph.kernels.mixed import Mixed, forward_loss
from flextui.graph.kernels.positional import key_of
from flextui.graph.kernels.synthetic import input_block
from flextui.graph.region import region_shape, within
from flextui.graph.tensor import FLOAT_DTYPES
from flextui.runtime.comm import Comm, PendingSums, Transfer
from flextui.runtime.computeclock import ComputeClock, TaskKind
from flextui.runtime.optimizer import SGD, Optimizer
from flextui.runtime.plan import Piece, Plan
from flextui.runtime.rank_update import RankUpdate
from flextui.runtime.values import StartingParameters
from flextui.runtime.walk import walk
from flextui.strategy import Strategy
from flextui.strategy.pipeline import Pass
from flextui.strategy.precision import Precision

if TYPE_CHECKING:
    from flextui.runtime.data import DatasetFeed


@dataclass(frozen=True)
class StepResult:
    """What one step did on this rank: its share of the loss (the shares of all ranks
    add up to the loss), seconds of compute and of waiting on communication, the bytes
    it sent and received, the gradient all-reduces it started, and with
    ``record_tasks`` the seconds of its tasks by kind."""

    loss_share: float
    step_s: float
    compute_s: float
    wait_s: float
    sent: int
    received: int
    sums: int = 0
    task_s: dict[TaskKind, float] = field(default_factory=dict)


def mixed_of(strategy: Strategy | None, master: torch.dtype) -> Mixed | None:
    """The mixed precision ``strategy`` computes in, its parameters kept in ``master``
    (None: it computes in ``master``)."""
    if strategy is None or strategy.precision == Precision.FP32:
        return None
    return Mixed(getattr(torch, strategy.precision.compute_dtype), master)


def kernel_seed(seed: int, step: int) -> int:
    """The seed a step's stochastic kernels (dropout) get, the same on every rank."""
    return key_of("kernels", seed, step)


class RankProgram:
    """The state of one rank (its parameter boxes and the optimizer's state of each:
    SGD's momentum, AdamW's moving averages) and its step; its data inputs read from
    ``data`` (the user's dataset) when given, else made from the seed."""

    def __init__(self, plan: Plan, rank: int, comm: Comm, *, seed: int = 0,
                 dtype: torch.dtype = torch.float32, optimizer: Optimizer = SGD,
                 record_tasks: bool = False, data: DatasetFeed | None = None) -> None:
        self.plan, self.rank, self.comm = plan, rank, comm
        self.data = data
        self.seed, self.dtype, self.optimizer = seed, dtype, optimizer
        #: bf16 strategies: the dtype ops compute in and activations move in
        self.mixed = mixed_of(plan.strategy, dtype)
        self.act_dtype = self.mixed.compute if self.mixed is not None else dtype
        self.record_tasks = record_tasks
        self.device = comm.device
        self.ops = plan.graph.ops
        self.tasks = [plan.tasks_on(op, rank) for op in self.ops]
        self.boxes: dict[str, Region] = {}
        self.params: dict[str, torch.Tensor] = {}
        start = StartingParameters(plan.graph, seed)
        for name, per_rank in plan.param_boxes.items():
            if rank in per_rank:
                box = self.boxes[name] = per_rank[rank]
                self.params[name] = start.block(name, box, dtype, self.device).requires_grad_()
        #: the gradients' sums, the optimizer's state and the update (``rank_update``)
        self.update = RankUpdate(plan, rank, comm, self.params, self.boxes, optimizer)
        self.buckets = [b for b in plan.buckets if rank in b[0].ranks]
        #: the pieces of each local task's input (op, k, slot) and output (op, m, o)
        self.into: dict[tuple[int, int, int], list[Piece]] = {}
        self.out_of: dict[tuple[int, int, int], list[Piece]] = {}
        for op in self.ops:
            for p in plan.pieces_into[op.index]:
                if p.dst == rank:
                    self.into.setdefault((p.consumer, p.k, p.slot), []).append(p)
                if p.src == rank:
                    self.out_of.setdefault((p.producer, p.m, p.output), []).append(p)
        #: the op after whose backward a parameter's gradient is complete on this rank,
        #: and each bucket's
        self.ready_after = {
            name: min(op.index for op in self.ops for p in op.params
                      if p.name == name and self.tasks[op.index])
            for name in self.params}
        self.bucket_ready = [min(self.ready_after[s.param] for s in bucket)
                             for bucket in self.buckets]
        #: the recomputed ops a later op's backward re-runs on this rank (the chain of
        #: ``_made_again``): their stage-3 parameters stay gathered until their backward
        self.rerun_later = {p.producer for op in self.ops for k in self.tasks[op.index]
                            for slot in range(len(op.inputs))
                            if plan.configs[op.index].recompute
                            and self._from_recomputed(op, k, slot)
                            for p in self.into[(op.index, k, slot)]}
        #: per recomputed op whose stage-3 parameters stay gathered: the micro-batches
        #: between its forward and backward passes
        self.open_passes: dict[int, int] = {}
        #: the passes of a step, in the order every rank runs them
        self.walk = walk(plan.graph, plan.configs, plan.strategy.pipeline)
        #: per op, the recomputed ops whose outputs nothing reads after its forward
        self.drop_after: dict[int, list[int]] = {}
        for op in self.ops:
            if plan.configs[op.index].recompute:
                last = max((c.index for c in plan.graph.successors(op)), default=op.index)
                self.drop_after.setdefault(last, []).append(op.index)

    # -- the step ----------------------------------------------------------------------

    def step(self, step: int) -> StepResult:
        started = time.perf_counter()
        self.comm.traffic.reset()
        clock = ComputeClock(self.device, by_task=self.record_tasks)
        seed = kernel_seed(self.seed, step)
        states = [_StepState(seed, clock, j) for j in range(self.plan.microbatches)]
        pending = PendingSums()
        next_bucket = 0
        # per op, its backward passes still to run; every op from ``through`` on has run
        # all of them: a bucket whose parameters' ops all lie there is summed
        left = [0 if op.type == "input" else len(states) for op in self.ops]
        through = len(self.ops)
        for phase, i, j in self.walk:
            op, state = self.ops[i], states[j]
            if phase == Pass.FORWARD:
                self._forward(op, step, state)
                for dropped in self.drop_after.get(i, ()):
                    for k in self.tasks[dropped]:
                        state.outputs.pop((dropped, k))
                continue
            self._backward(op, state)
            left[i] -= 1
            while through and not left[through - 1]:
                through -= 1
            while next_bucket < len(self.buckets) and \
                    self.bucket_ready[next_bucket] >= through:
                self.update.start_sum(self.buckets[next_bucket], pending)
                next_bucket += 1
        self.comm.wait(pending)
        began = clock.start()
        self.update.finish_sums()
        self.update.step(step)
        clock.stop(began)
        with torch.no_grad():
            self.update.sharded.gather()
        compute_s = state.clock.seconds()  # on a GPU, once the step's kernels are done
        traffic = self.comm.traffic
        return StepResult(sum(s.loss_share for s in states), time.perf_counter() - started,
                          compute_s,
                          traffic.wait_s, traffic.sent, traffic.received, traffic.sums,
                          clock.task_s)

    def evaluate(self, data: DatasetFeed | None, batches: int) -> float:
        """This rank's share of the mean loss over ``batches`` batches of ``data`` (the
        validation split; None: the rank reads none of it), forward only: no gradient,
        no update."""
        training, self.data = self.data, data
        total = 0.0
        try:
            with torch.no_grad():
                for batch in range(batches):
                    for j in range(self.plan.microbatches):
                        state = _StepState(kernel_seed(self.seed, batch),
                                           ComputeClock(self.device), j)
                        for op in self.ops:
                            self._forward(op, batch, state)
                        total += state.loss_share
        finally:
            self.data = training
        return total / batches

    def task_counts(self) -> dict[tuple[int, tuple[int, ...]], int]:
        """How many tasks of each op and block shape this rank runs in a step (a graph
        input's task makes its block of the batch; each micro-batch's count)."""
        counts: dict[tuple[int, tuple[int, ...]], int] = {}
        for op in self.ops:
            for k in self.tasks[op.index]:
                kind = (op.index, region_shape(self.plan.region(op, k)))
                counts[kind] = counts.get(kind, 0) + self.plan.microbatches
        return counts

    def _forward(self, op: Op, step: int, state: _StepState) -> None:
        pieces = self.plan.pieces_into[op.index]
        received = self._move(pieces, forward=True, state=state)
        self._gather(op)
        for k in self.tasks[op.index]:
            region, at = self.plan.region(op, k), self.plan.region_at(op, k, state.micro)
            began = state.clock.start()
            if op.type == "input":
                out_region = op.output_regions(at)[0]
                inputs = [self.data.block(op, out_region, step)
                          if self.data is not None and self.data.feeds(op) else
                          input_block(op, out_region, self.seed, step, self.dtype,
                                      self.plan.index_bounds.get(op.index), self.device)]
            else:
                inputs = [self._input_block(op, k, slot, need, received, state)
                          for slot, need in enumerate(op.input_regions(region))]
            recompute = self.plan.configs[op.index].recompute
            with torch.no_grad() if recompute else contextlib.nullcontext():
                outputs, loss = self._run_block(op, at, inputs, state)
            state.clock.stop(began, self._kind(op, region, backward=False))
            if recompute:
                state.kept[(op.index, k)] = [None if self._from_recomputed(op, k, slot) else leaf
                                             for slot, leaf in enumerate(inputs)]
            else:
                state.inputs[(op.index, k)] = inputs
            state.outputs[(op.index, k)] = outputs
            if loss is not None:
                if not recompute:
                    state.losses[(op.index, k)] = loss
                state.loss_share += float(loss.detach())
        if op.index in self.rerun_later:
            self.open_passes[op.index] = self.open_passes.get(op.index, 0) + 1
        else:
            self._release(op)

    def _gather(self, op: Op) -> None:
        """Gather ``op``'s stage-3 parameters (``sharded``) before its tasks run."""
        with torch.no_grad():
            for p in op.params:
                self.update.sharded.gather_param(p.name)

    def _release(self, op: Op) -> None:
        for p in op.params:
            self.update.sharded.release_param(p.name)

    def whole_params(self) -> contextlib.AbstractContextManager[None]:
        """Every box of this rank filled while the block runs (``ShardedState.whole``:
        every rank enters it together)."""
        return self.update.sharded.whole()

    def _from_recomputed(self, op: Op, k: int, slot: int) -> bool:
        """Whether input ``slot`` of task ``k`` is, as it is, the output block of a
        recomputed task on this rank: not kept, it is made again when needed."""
        mine = self.into[(op.index, k, slot)]
        if len(mine) != 1 or not mine[0].local:
            return False
        producer = self.ops[mine[0].producer]
        if producer.type == "input" or not self.plan.configs[producer.index].recompute:
            return False
        out_region = producer.output_regions(self.plan.region(producer, mine[0].m))[mine[0].output]
        return out_region == op.input_regions(self.plan.region(op, k))[slot]

    def _rerun(self, op: Op, m: int, state: _StepState
               ) -> tuple[list[torch.Tensor], torch.Tensor | None, list[torch.Tensor]]:
        """A recomputed task run again with autograd (once: kept until its backward):
        its outputs, share of the loss and input blocks, those it did not keep made
        again from the tasks that produced them (a chain of recomputed tasks re-runs
        from the first input it kept, as a checkpointed segment does)."""
        key = (op.index, m)
        if key not in state.reruns:
            inputs = [leaf if leaf is not None else self._made_again(op, m, slot, state)
                      for slot, leaf in enumerate(state.kept[key])]
            outputs, loss = self._run_block(op, self.plan.region_at(op, m, state.micro), inputs,
                                            state)
            state.reruns[key] = (outputs, loss, inputs)
        return state.reruns[key]

    def _made_again(self, op: Op, m: int, slot: int, state: _StepState) -> torch.Tensor:
        p = self.into[(op.index, m, slot)][0]
        outputs = self._rerun(self.ops[p.producer], p.m, state)[0]
        return outputs[p.output].detach().requires_grad_(op.inputs[slot].dtype in FLOAT_DTYPES)

    def _run_block(self, op: Op, region: Region, inputs: list[torch.Tensor],
                   state: _StepState) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The block kernel of ``op`` on ``region``: its outputs and share of the loss."""
        params = [self._shard(p.name, op.param_region(i, region))
                  for i, p in enumerate(op.params)]
        return forward_loss(op, region, inputs, params, state.kernel_seed, self.mixed)

    def _kind(self, op: Op, region: Region, backward: bool) -> TaskKind | None:
        """The kind of a task, when task times are recorded (a graph input's too: the
        time the rank takes to make, or read, its block of the batch)."""
        if not self.record_tasks:
            return None
        return op.index, region_shape(region), backward

    def _shard(self, name: str, region: Region) -> torch.Tensor:
        """A task's shard of a parameter: a view of the rank's box, or the box itself
        when the shard is all of it (no view to go back through in the backward pass)."""
        box = self.boxes[name]
        return self.params[name] if region == box else self.params[name][within(region, box)]

    def _input_block(self, op: Op, k: int, slot: int, need: Region,
                     received: dict[Piece, torch.Tensor], state: _StepState) -> torch.Tensor:
        """Input ``slot`` of task ``k``, assembled from its pieces as a leaf tensor."""
        mine = self.into[(op.index, k, slot)]
        tensor = op.inputs[slot]
        # data (an input op's output) gets no gradient: nothing would receive it
        grad = tensor.dtype in FLOAT_DTYPES and tensor.producer is not None \
            and tensor.producer.type != "input"
        if len(mine) == 1 and mine[0].local:
            whole = self._producer_block(mine[0], state)
            if tuple(whole.shape) == region_shape(need):  # the producer's block, as it is
                return whole.detach().requires_grad_(grad)
        first = self._piece_value(mine[0], received, state)
        block = torch.empty(region_shape(need), dtype=first.dtype, device=self.device)
        for p in mine:
            block[within(p.region, need)] = self._piece_value(p, received, state)
        return block.requires_grad_(grad)

    def _producer_block(self, p: Piece, state: _StepState) -> torch.Tensor:
        return state.outputs[(p.producer, p.m)][p.output]

    def _piece_value(self, p: Piece, received: dict[Piece, torch.Tensor],
                     state: _StepState) -> torch.Tensor:
        return self._producer_slice(p, state) if p.local else received[p]

    def _producer_slice(self, p: Piece, state: _StepState) -> torch.Tensor:
        """The piece, cut from its producer's output block on this rank."""
        producer = self.ops[p.producer]
        out_region = producer.output_regions(self.plan.region(producer, p.m))[p.output]
        return self._producer_block(p, state).detach()[within(p.region, out_region)]

    def _backward(self, op: Op, state: _StepState) -> None:
        pieces = self.plan.pieces_from[op.index]
        received = self._move(pieces, forward=False, state=state)
        self._gather(op)
        recompute = self.plan.configs[op.index].recompute
        for m in self.tasks[op.index]:
            region = self.plan.region(op, m)
            if recompute:   # the forward again, its time no task kind's
                began = state.clock.start()
                outputs, loss, inputs = self._rerun(op, m, state)
                del state.reruns[(op.index, m)], state.kept[(op.index, m)]
                state.clock.stop(began)
            else:
                outputs = state.outputs.pop((op.index, m))
                loss = state.losses.pop((op.index, m), None)
                inputs = state.inputs.pop((op.index, m))
            began = state.clock.start()
            roots, seeds = [], []
            out_regions = op.output_regions(region)
            for o, (out, out_region) in enumerate(zip(outputs, out_regions)):
                grad = self._output_grad(self.out_of.get((op.index, m, o), []), out_region,
                                         received, state)
                if grad is not None and out.requires_grad:
                    roots.append(out)
                    seeds.append(grad)
            if loss is not None:
                roots.append(loss)
                seeds.append(torch.ones_like(loss))
            if roots:
                torch.autograd.backward(roots, seeds)
            for slot, (leaf, need) in enumerate(zip(inputs, op.input_regions(region))):
                if leaf.grad is None:
                    continue
                for p in self.into[(op.index, m, slot)]:
                    if self.ops[p.producer].type != "input":
                        state.grads[p] = leaf.grad[within(p.region, need)]
            state.clock.stop(began, self._kind(op, region, backward=True))
        if op.index in self.rerun_later:   # kept gathered while a micro-batch may re-run it
            self.open_passes[op.index] -= 1
            if self.open_passes[op.index]:
                return
        self._release(op)

    def _output_grad(self, pieces: list[Piece], out_region: Region,
                     received: dict[Piece, torch.Tensor], state: _StepState
                     ) -> torch.Tensor | None:
        """The gradient of an output block: the sum of the gradients of its ``pieces``
        (None when no consumer's gradient reaches it)."""
        mine = [p for p in pieces if p in received or p in state.grads]
        if not mine:
            return None
        if len(mine) == 1 and mine[0].region == out_region:  # the whole block, as it came
            p = mine[0]
            return received[p] if p in received else state.grads.pop(p)
        total = torch.zeros(region_shape(out_region), dtype=self.act_dtype, device=self.device)
        for p in mine:
            total[within(p.region, out_region)] += received[p] if p in received \
                else state.grads.pop(p)
        return total

    def _move(self, pieces: list[Piece], forward: bool, state: _StepState
              ) -> dict[Piece, torch.Tensor]:
        """Send and receive this rank's remote pieces (forward: the data, from producer
        to consumer; backward: their gradients, back); returns what arrived."""
        transfers, received = [], {}
        for p in pieces:
            if p.local or self.rank not in (p.src, p.dst):
                continue
            if not forward and self.ops[p.producer].type == "input":
                continue
            sender, receiver = (p.src, p.dst) if forward else (p.dst, p.src)
            if self.rank == sender:
                value = self._producer_slice(p, state) if forward else state.grads.pop(p, None)
                if value is None:  # a consumer block whose input has no gradient
                    value = torch.zeros(region_shape(p.region), dtype=self.act_dtype,
                                        device=self.device)
                transfers.append(Transfer(True, receiver, value.contiguous()))
            else:
                dtype = self._piece_dtype(p) if forward else self.act_dtype
                buffer = torch.empty(region_shape(p.region), dtype=dtype, device=self.device)
                received[p] = buffer
                transfers.append(Transfer(False, sender, buffer))
        self.comm.exchange(transfers)
        return received

    def _piece_dtype(self, p: Piece) -> torch.dtype:
        dtype = self.ops[p.consumer].inputs[p.slot].dtype
        return self.act_dtype if dtype in FLOAT_DTYPES else getattr(torch, dtype)


class _StepState:
    """What one step (one micro-batch of it) keeps between its forward and backward
    passes."""

    def __init__(self, kernel_seed: int, clock: ComputeClock, micro: int = 0) -> None:
        self.kernel_seed = kernel_seed
        self.clock = clock
        self.micro = micro   # the micro-batch
        self.inputs: dict[tuple[int, int], list[torch.Tensor]] = {}
        #: per recomputed task, its input blocks, None where one is made again
        self.kept: dict[tuple[int, int], list[torch.Tensor | None]] = {}
        #: recomputed tasks run again, until their backward
        self.reruns: dict[tuple[int, int], tuple[list[torch.Tensor], torch.Tensor | None,
                                                 list[torch.Tensor]]] = {}
        self.outputs: dict[tuple[int, int], list[torch.Tensor]] = {}
        self.losses: dict[tuple[int, int], torch.Tensor] = {}
        self.grads: dict[Piece, torch.Tensor] = {}
        self.loss_share = 0.0
