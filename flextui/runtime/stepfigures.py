"""Each step of a run as people follow training: its loss, learning rate, samples/s,
tokens/s and MFU, joined from the ranks' ``steps`` records.

The loss. Every rank reports its share of each step's loss (``Steps.losses``, one per
step); the step's loss is their sum, made here, in the launcher (and by whoever reads a
run log), not by an all-reduce on the ranks: the shares already cross the process
boundary as typed records, so the sum costs the ranks no collective, no wait and no
device-to-host copy per step (it would perturb the very step times and bytes measured
against the simulator), and a run log alone gives the same losses again. The shares are
added in rank order, in float64, once every rank has reported the step.

The time of a step is the slowest rank's mean over the report that carried it (ranks
report at most twice a second, so a row's throughput is that window's). Samples/s is the
batch over it; tokens/s counts ``tokens_per_sample`` tokens a sample, the longest T of
the graph's integer ``[B, T]`` inputs (a language model's token ids; its labels and
positions are the same tokens, counted once); a model without such an input has none.
MFU is the graph's FLOPs of a step (forward and backward, ``OpGraph.total_flops``) over
the step's time times the summed peak FLOP/s, in the run's dtype, of the devices the
strategy uses; none where a device has no peak for that dtype (float64), and a CPU's
peak is an estimate (``peak_estimated``, said wherever MFU is shown).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flextui.graph import OpGraph
from flextui.graph.tensor import DType
from flextui.machine import Cluster
from flextui.runtime.metrics import RankRecord, Steps
from flextui.runtime.spec import LaunchSpec, Training, lr_at
from flextui.runtime.summary import RunSummary

#: the dtypes of token ids
TOKEN_DTYPES = (DType.INT64, DType.INT32)


def tokens_per_sample(graph: OpGraph) -> int | None:
    """The tokens a sample holds: the longest T of the graph's integer ``[B, T]`` inputs
    (None: it has none, so no tokens/s)."""
    lengths = [op.outputs[0].shape[1] for op in graph.ops
               if op.type == "input" and op.outputs[0].dtype in TOKEN_DTYPES
               and len(op.outputs[0].shape) == 2 and op.outputs[0].shape[0] == graph.batch_size]
    return max(lengths, default=None)


@dataclass(frozen=True)
class ModelWork:
    """What a step of a launch computes and what its devices could: the batch, the
    tokens a sample, the graph's FLOPs a step, and the peak FLOP/s of the devices used
    (None: unknown for the run's dtype), an estimate when any is a CPU's."""

    batch_size: int
    tokens_per_sample: int | None
    flops_per_step: float
    peak_flops: float | None
    peak_estimated: bool

    @classmethod
    def of(cls, spec: LaunchSpec, cluster: Cluster) -> ModelWork:
        graph, dtype = spec.graph, str(spec.training.dtype)
        used = [cluster.devices[d].spec for d in sorted(spec.strategy.devices_used())]
        peaks = [s.peak_flops.get(dtype) for s in used]
        known = [p for p in peaks if p is not None]
        return cls(graph.batch_size, tokens_per_sample(graph), sum(graph.total_flops()),
                   sum(known) if known and len(known) == len(peaks) else None,
                   any(s.is_cpu for s in used))

    def rates(self, step_s: float) -> tuple[float, float | None, float | None]:
        """Samples/s, tokens/s and MFU of a step of ``step_s`` seconds (0 and None for
        a step of no time)."""
        if step_s <= 0:
            return 0.0, None, None
        samples = self.batch_size / step_s
        tokens = samples * self.tokens_per_sample if self.tokens_per_sample else None
        mfu = self.flops_per_step / step_s / self.peak_flops if self.peak_flops else None
        return samples, tokens, mfu


@dataclass(frozen=True)
class StepRow:
    """One step of a run: its loss (None: an older run log kept only a mean of it), its
    learning rate, its time (the slowest rank's, see the module) and the rates from it."""

    step: int
    warmup: bool
    loss: float | None
    lr: float
    step_s: float
    samples_per_s: float
    tokens_per_s: float | None
    mfu: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: the columns of a row, in order: a CSV log's header
ROW_FIELDS = tuple(StepRow.__dataclass_fields__)


@dataclass
class _Pending:
    """What the ranks have reported of one step so far."""

    warmup: bool
    shares: dict[int, float | None] = field(default_factory=dict)
    step_s: float = 0.0


class StepJoin:
    """Joins the ranks' ``steps`` records into rows, each once every rank has reported
    its step, in step order (``add`` returns the rows it completes). It holds only the
    steps some rank has reported and another not yet."""

    def __init__(self, num_ranks: int, work: ModelWork, training: Training) -> None:
        self.num_ranks, self.work, self.training = num_ranks, work, training
        self.pending: dict[int, _Pending] = {}
        self.next = 0

    def add(self, record: RankRecord) -> list[StepRow]:
        if not isinstance(record, Steps) or record.rank >= self.num_ranks:
            return []
        shares = record.step_losses or (None,) * record.count
        mean_s = record.step_s / record.count
        for step, share in zip(range(record.first, record.last + 1), shares):
            if step < self.next:
                continue
            pending = self.pending.setdefault(step, _Pending(record.warmup))
            pending.shares[record.rank] = share
            pending.step_s = max(pending.step_s, mean_s)
        rows = []
        while len(self.pending.get(self.next, _Pending(False)).shares) == self.num_ranks:
            rows.append(self._row(self.next, self.pending.pop(self.next)))
            self.next += 1
        return rows

    def _row(self, step: int, pending: _Pending) -> StepRow:
        shares = [pending.shares[rank] for rank in range(self.num_ranks)]
        loss = None if any(s is None for s in shares) else \
            sum(s for s in shares if s is not None)
        return StepRow(step, pending.warmup, loss, lr_at(self.training, step),
                       pending.step_s, *self.work.rates(pending.step_s))


def step_rows(records: Iterable[RankRecord], spec: LaunchSpec, cluster: Cluster
              ) -> list[StepRow]:
    """Every step a run's records cover on all its ranks, in order."""
    join = StepJoin(spec.num_ranks, ModelWork.of(spec, cluster), spec.training)
    return [row for record in records for row in join.add(record)]


@dataclass(frozen=True)
class RunFigures:
    """A run's figures beside its summary: tokens/s and MFU over its timed steps (the
    summary's iteration), what they were taken from, and every step."""

    tokens_per_s: float | None
    mfu: float | None
    work: ModelWork
    rows: list[StepRow]

    @classmethod
    def of(cls, summary: RunSummary, records: Iterable[RankRecord], spec: LaunchSpec,
           cluster: Cluster) -> RunFigures:
        work = ModelWork.of(spec, cluster)
        _, tokens, mfu = work.rates(summary.iteration_s)
        return cls(tokens, mfu, work, step_rows(records, spec, cluster))

    @property
    def last_loss(self) -> StepRow | None:
        """The last step whose loss is known."""
        return next((row for row in reversed(self.rows) if row.loss is not None), None)

    def to_dict(self) -> dict[str, Any]:
        """What ``launch --json`` and ``runs show --json`` add to the summary."""
        return {"tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "flops_per_step": self.work.flops_per_step,
                "peak_flops": self.work.peak_flops, "peak_estimated": self.work.peak_estimated,
                "per_step": [row.to_dict() for row in self.rows]}
