"""What a display shows of a launch in progress: the ranks' records folded into one
frame per poll (``LaunchWatch.view``), with a bounded history of each device's
samples/s for its sparkline, the loss of the run's steps (the ranks' shares summed,
``runtime.stepfigures``) for its chart, and a bounded tail of the ranks' output.

The watch keeps sums, not records: a run of a million steps costs it the same memory
as a run of ten (HISTORY points per device, LOG_LINES lines, LOSS_POINTS losses: every
step's until there are more, then every second step's, every fourth, ..., so the chart
spans the whole run).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from flextui.runtime.metrics import RankRecord, Start, Steps
from flextui.runtime.stepfigures import StepJoin
from flextui.runtime.summary import DeviceMeasure, DeviceRow, Simulated, summary_of_measures
from flextui.session.jobs import JobState

HISTORY = 120        # samples/s points per device (a sparkline's width, and then some)
LOG_LINES = 1000     # lines of the ranks' output kept for the log pane
LOSS_POINTS = 240    # the most losses kept for the loss chart


class Thinned:
    """At most ``most`` points (step, value) of a run, spread over all of it: the
    steps that are a multiple of ``stride``, which doubles whenever they grow past
    ``most`` (steps come in order, from 0)."""

    def __init__(self, most: int = LOSS_POINTS) -> None:
        self.most, self.stride = most, 1
        self.points: list[tuple[int, float]] = []

    def add(self, step: int, value: float) -> None:
        if step % self.stride:
            return
        self.points.append((step, value))
        if len(self.points) > self.most:
            self.stride *= 2
            self.points = [p for p in self.points if p[0] % self.stride == 0]


@dataclass(frozen=True)
class LaunchView:
    """One frame of a launch: its state, its devices, its totals and the last lines."""

    state: JobState
    devices: list[DeviceRow]
    histories: list[tuple[float, ...]]   # each device's recent samples/s, oldest first
    steps_done: int
    steps_asked: int
    warmup: int
    elapsed_s: float
    samples_per_s: float
    iteration_s: float
    simulated_iteration_s: float | None
    lines: list[tuple[int, str]]
    line_count: int                     # lines so far: ``lines`` are the last of them
    message: str | None = None
    failed_rank: int | None = None
    host: str | None = None
    losses: tuple[tuple[int, float], ...] = ()   # (step, loss), spread over the run

    @property
    def iteration_error(self) -> float | None:
        if not self.simulated_iteration_s or not self.iteration_s:
            return None
        return self.iteration_s / self.simulated_iteration_s - 1.0

    @property
    def remaining_s(self) -> float | None:
        """The time the steps left should take at the measured pace."""
        if not self.iteration_s:
            return None
        total = self.warmup + self.steps_asked
        return max(0, total - self.steps_done) * self.iteration_s


@dataclass
class LaunchWatch:
    """Folds records and output lines; not thread-safe (its owner locks)."""

    names: list[str]
    capacities: list[int]
    batch_size: int
    steps_asked: int
    warmup: int
    simulated: Simulated | None
    join: StepJoin | None = None    # the steps' losses (None: no loss chart)
    measures: list[DeviceMeasure] = field(default_factory=list)
    history: list[collections.deque[float]] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)
    lines: collections.deque[tuple[int, str]] = field(
        default_factory=lambda: collections.deque(maxlen=LOG_LINES))
    line_count: int = 0
    losses: Thinned = field(default_factory=Thinned)

    def __post_init__(self) -> None:
        self.measures = [DeviceMeasure(rank) for rank in range(len(self.names))]
        self.history = [collections.deque(maxlen=HISTORY) for _ in self.names]
        self.done = [0] * len(self.names)

    def record(self, record: RankRecord) -> None:
        rank = record.rank
        if rank >= len(self.names):
            return
        if isinstance(record, Start):
            self.hosts[rank] = record.host
        for row in self.join.add(record) if self.join is not None else ():
            if row.loss is not None:
                self.losses.add(row.step, row.loss)
        if not isinstance(record, Steps):
            return
        self.measures[rank].add(record)
        self.done[rank] = max(self.done[rank], record.last + 1)
        step = record.step_s / record.count
        if step > 0 and not record.warmup:
            self.history[rank].append(self.batch_size / step)

    def output(self, rank: int, line: str) -> None:
        self.lines.append((rank, line))
        self.line_count += 1

    def view(self, state: JobState, elapsed_s: float, message: str | None = None,
             failed_rank: int | None = None, lines: int = 200) -> LaunchView:
        summary = summary_of_measures(self.measures, self.names, self.capacities,
                                      self.batch_size, self.simulated)
        tail = list(self.lines)[-lines:]
        return LaunchView(state, summary.devices, [tuple(h) for h in self.history],
                          min(self.done, default=0), self.steps_asked, self.warmup, elapsed_s,
                          summary.samples_per_s, summary.iteration_s,
                          summary.simulated_iteration_s, tail, self.line_count, message,
                          failed_rank, self.hosts.get(failed_rank)
                          if failed_rank is not None else None, tuple(self.losses.points))
