"""Task times measured by a launch's ranks, into a profile cache of their own
(``flextui launch --record-profile``), so a search can use them (``--cost recorded``).

Each rank reports the mean time of each of its tasks over the timed steps (``tasks``
records: ``runtime.tasktimes``) with the name its device's profiles have (a GPU's, or
the CPU's with the rank's threads: ``cost.cpu_threads``). Here the ranks' figures for
one op and block shape are averaged, weighted by how many task runs each is over, and
written with the cache's own writer under the key the profiler would use, as training
times in the run's dtype with this torch, into the ``in-run`` subdirectory of the
profile directory: kept apart from what the profiler measured alone, so a cost model
uses one or the other as asked (``cost.choose``: ``--cost recorded`` or ``profiled``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flextui.cost.cache import ProfileCache, ProfileEntry, ProfileKey
from flextui.cost.cache_dirs import in_run_profile_dir, user_profile_dir
from flextui.cost.mathmode import measurement_now
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.runtime.metrics import RankRecord, TaskRow, Tasks


@dataclass(frozen=True)
class Recorded:
    """What a launch wrote into one device's profile cache."""

    device: str
    path: Path
    tasks: int       # entries written (one per op and block shape)
    runs: int        # task runs the entries average over

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "file": str(self.path), "tasks": self.tasks,
                "runs": self.runs}


def check_recording(profiles: str | None) -> Path:
    """The profile directory a launch's task times will go into; FlextuiError now, before
    any rank starts, if it cannot be written."""
    directory = in_run_profile_dir(profiles)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".flextui-check-"):
            pass
    except OSError as exc:
        raise FlextuiError(f"--record-profile: cannot write profiles to {directory} "
                           f"({exc.strerror or exc}); make it writable or choose another "
                           "directory with --profiles DIR") from None
    return directory


def merged_times(graph: OpGraph, records: Iterable[RankRecord]
                 ) -> dict[str, dict[tuple[int, tuple[int, ...]], tuple[float, float, int]]]:
    """Per device name, per (op index, block shape): (forward s, backward s, runs), the
    ranks' means averaged by runs (a graph input's backward 0: making the batch has
    none). Other rows without a backward time, or not a task of ``graph`` (a record
    from another run), are left out."""
    sums: dict[str, dict[tuple[int, tuple[int, ...]], list[float]]] = {}
    for record in records:
        if not isinstance(record, Tasks):
            continue
        per_device = sums.setdefault(record.device, {})
        for row in record.tasks:
            if not _is_task(graph, row):
                continue
            backward = 0.0 if graph.ops[row.op].type == "input" else row.backward_s
            if backward is None:
                continue
            total = per_device.setdefault((row.op, row.shape), [0.0, 0.0, 0])
            total[0] += row.forward_s * row.runs
            total[1] += backward * row.runs
            total[2] += row.runs
    return {device: {kind: (f / n, b / n, int(n)) for kind, (f, b, n) in per_device.items()}
            for device, per_device in sums.items() if per_device}


def _is_task(graph: OpGraph, row: TaskRow) -> bool:
    """Whether ``row`` is a task of ``graph``: one of its ops (a graph input's task makes
    its block of the batch), and a block shape that divides its space."""
    if row.op >= len(graph.ops):
        return False
    op = graph.ops[row.op]
    return len(row.shape) == len(op.space) and all(
        d.size % n == 0 for n, d in zip(row.shape, op.space))


def record_profile(graph: OpGraph, records: Iterable[RankRecord],
                   profiles: str | None = None, dtype: str = "float32") -> list[Recorded]:
    """Write the task times in a run's ``records`` into the in-run profile caches of the
    devices they were measured on (``in_run_profile_dir(profiles)``); one ``Recorded``
    per cache written. FlextuiError if a cache cannot be saved."""
    directory = in_run_profile_dir(profiles)
    written = []
    for device, times in merged_times(graph, records).items():
        # read through to the profiler's cache: the peak memory it measured is kept
        cache = ProfileCache(device, [directory, user_profile_dir(profiles)])
        measurement = measurement_now(dtype, True, device)
        for (op_index, shape), (forward, backward, runs) in times.items():
            key: ProfileKey = measurement.key(graph.ops[op_index], shape)
            before = cache.get(key)
            memory = before.peak_memory_bytes if before is not None else 0
            cache.put(key, ProfileEntry(forward, backward, repeats=runs,
                                        peak_memory_bytes=memory))
        cache.save()
        written.append(Recorded(device, cache.path, len(times),
                                sum(runs for _, _, runs in times.values())))
    return written
