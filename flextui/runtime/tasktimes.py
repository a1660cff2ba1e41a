"""Task times as a rank measured them (``flextui launch --record-profile``).

A rank sums the compute time of its tasks by kind (op, block shape, forward or
backward: ``computeclock.ComputeClock``) over the timed steps, and at the end reports, for
each op and block shape, the mean forward and backward time of one task and how many
task runs the mean is over, in ``tasks`` records (as many as keep each line under
``metrics.MAX_LINE``). The launcher merges every rank's into the profile cache
(``runtime.recording``).
"""

from __future__ import annotations

import json

from flextui.runtime.computeclock import TaskKind
from flextui.runtime.metrics import MAX_LINE, TaskRow, Tasks

#: room left in a line for the record's other fields
_ROOM = MAX_LINE - 400


class TaskTimes:
    """One rank's task times over its timed steps; ``counts``: how many tasks of each
    op and block shape the rank runs in a step (``RankProgram.task_counts``)."""

    def __init__(self, counts: dict[tuple[int, tuple[int, ...]], int]) -> None:
        self.counts = counts
        self.steps = 0
        self.sums: dict[TaskKind, float] = {}

    def add(self, task_s: dict[TaskKind, float]) -> None:
        """One timed step's task times."""
        self.steps += 1
        for kind, seconds in task_s.items():
            self.sums[kind] = self.sums.get(kind, 0.0) + seconds

    def rows(self) -> list[TaskRow]:
        """Per op and block shape, the mean time of one task over the runs of it."""
        rows = []
        for (op, shape), count in sorted(self.counts.items()):
            runs = count * self.steps
            forward = self.sums.get((op, shape, False))
            if not runs or forward is None:
                continue
            backward = self.sums.get((op, shape, True))
            rows.append(TaskRow(op, shape, forward / runs,
                                None if backward is None else backward / runs, runs))
        return rows

    def records(self, rank: int, device: str) -> list[Tasks]:
        """The ``tasks`` records of rank ``rank`` (``device``: the name a profile of its
        device has), each under a line's size."""
        chunks: list[list[TaskRow]] = [[]]
        used = 0
        for row in self.rows():
            size = len(json.dumps(row.to_list(), separators=(",", ":"))) + 1
            if chunks[-1] and used + size > _ROOM:
                chunks.append([])
                used = 0
            chunks[-1].append(row)
            used += size
        return [Tasks(rank, device, self.steps, tuple(chunk)) for chunk in chunks if chunk]
