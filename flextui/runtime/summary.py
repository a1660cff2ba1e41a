"""What a run measured, per device and overall, against what the simulator predicted:
plain data for the command line, the run log's readers and the app."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flextui.fields import FieldReader
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.runtime.metrics import RankRecord, Steps
from flextui.strategy import Strategy
from flextui.strategy.pipeline import stages

#: a device whose measured busy time is off the simulated by more than this is
#: highlighted
DEVIATION = 0.25


@dataclass(frozen=True)
class Simulated:
    """What the simulator predicted for a launch: the iteration, each device's busy time
    (compute per step), and the cost model it used (its identity)."""

    iteration_s: float
    busy_s: tuple[float, ...]
    cost_model: str

    def to_dict(self) -> dict[str, Any]:
        return {"iteration_s": self.iteration_s, "busy_s": list(self.busy_s),
                "cost_model": self.cost_model}

    @classmethod
    def read(cls, f: FieldReader, value: object, where: str, devices: int) -> Simulated:
        """``to_dict``'s data for ``devices`` devices, checked."""
        t = f.exact_keys(value, ("iteration_s", "busy_s", "cost_model"), where)
        busy = f.items(t["busy_s"], f"{where} busy_s", devices)
        return cls(f.number(t["iteration_s"], f"{where} iteration_s", 0.0),
                   tuple(f.number(b, f"{where} busy_s", 0.0) for b in busy),
                   f.string(t["cost_model"], f"{where} cost_model", limit=None))


@dataclass
class DeviceMeasure:
    """One rank's timed steps, summed (warm-up steps left out)."""

    rank: int
    steps: int = 0
    step_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    sent: int = 0
    received: int = 0
    peak_memory: int = 0
    gpu_util: float | None = None
    losses: list[float] = field(default_factory=list)

    def add(self, record: Steps) -> None:
        """Add a ``steps`` record of this rank (a warm-up one only moves the memory)."""
        self.peak_memory = max(self.peak_memory, record.peak_memory)
        if record.gpu_util is not None:
            self.gpu_util = record.gpu_util
        if record.warmup:
            return
        self.steps += record.count
        self.step_s += record.step_s
        self.compute_s += record.compute_s
        self.wait_s += record.wait_s
        self.sent += record.sent
        self.received += record.received
        self.losses.extend(record.losses)

    def mean(self, total: float) -> float:
        return total / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class DeviceRow:
    """A device's line of the summary: measured, and simulated where known."""

    rank: int
    name: str
    samples_per_s: float
    step_s: float
    compute_share: float
    wait_share: float
    peak_memory: int
    memory_capacity: int
    gpu_util: float | None
    busy_s: float
    simulated_busy_s: float | None

    @property
    def busy_error(self) -> float | None:
        """Measured busy time against simulated, as a fraction (0.1: 10% over)."""
        if not self.simulated_busy_s or not self.busy_s:
            return None
        return self.busy_s / self.simulated_busy_s - 1.0

    @property
    def deviates(self) -> bool:
        """Off the simulated by more than DEVIATION: shown highlighted."""
        error = self.busy_error
        return error is not None and abs(error) > DEVIATION


@dataclass(frozen=True)
class RunSummary:
    batch_size: int
    steps: int
    iteration_s: float
    simulated_iteration_s: float | None
    devices: list[DeviceRow]

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.iteration_s if self.iteration_s else 0.0

    @property
    def iteration_error(self) -> float | None:
        if not self.simulated_iteration_s:
            return None
        return self.iteration_s / self.simulated_iteration_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "steps": self.steps,
                "iteration_s": self.iteration_s, "samples_per_s": self.samples_per_s,
                "simulated_iteration_s": self.simulated_iteration_s,
                "iteration_error": self.iteration_error,
                "devices": [{**row.__dict__, "busy_error": row.busy_error}
                            for row in self.devices]}


def measures(records: Iterable[RankRecord], num_ranks: int) -> list[DeviceMeasure]:
    """Each rank's sums over the ``steps`` records of a run."""
    found = [DeviceMeasure(rank) for rank in range(num_ranks)]
    for record in records:
        if isinstance(record, Steps) and record.rank < num_ranks:
            found[record.rank].add(record)
    return found


def device_labels(cluster: Cluster, graph: OpGraph, strategy: Strategy) -> list[str]:
    """Each device's name for a run's table, and with micro-batches the pipeline stages
    of its ops (``n1.gpu0 · stage 1``): what is measured against simulated, per stage."""
    names = [d.name for d in cluster.devices]
    if not strategy.pipeline.on:
        return names
    stage = stages(graph, strategy.configs_of(graph))
    held: dict[int, set[int]] = {}
    for op in graph.ops:
        for d in strategy[op.name].devices:
            held.setdefault(d, set()).add(stage[op.index])
    return [name + (f" · stage {'/'.join(map(str, sorted(held[i])))}" if i in held else "")
            for i, name in enumerate(names)]


def summarize(records: Iterable[RankRecord], device_names: list[str],
              capacities: list[int], batch_size: int,
              simulated: Simulated | None) -> RunSummary:
    """The summary of a run's records against ``simulated`` (None: nothing to compare
    with)."""
    return summary_of_measures(measures(records, len(device_names)), device_names,
                               capacities, batch_size, simulated)


def summary_of_measures(per_rank: list[DeviceMeasure], device_names: list[str],
                        capacities: list[int], batch_size: int,
                        simulated: Simulated | None) -> RunSummary:
    """``summarize`` of ranks' sums kept as the records came (a live launch's)."""
    step_means = [m.mean(m.step_s) for m in per_rank if m.steps]
    iteration = max(step_means, default=0.0)   # a step ends when its slowest rank does
    busy = simulated.busy_s if simulated else (None,) * len(device_names)
    rows = []
    for m, name, capacity, predicted in zip(per_rank, device_names, capacities, busy):
        step = m.mean(m.step_s)
        rows.append(DeviceRow(m.rank, name, batch_size / step if step else 0.0, step,
                              m.compute_s / m.step_s if m.step_s else 0.0,
                              m.wait_s / m.step_s if m.step_s else 0.0,
                              m.peak_memory, capacity, m.gpu_util, m.mean(m.compute_s),
                              predicted))
    return RunSummary(batch_size, max((m.steps for m in per_rank), default=0), iteration,
                      simulated.iteration_s if simulated else None, rows)
