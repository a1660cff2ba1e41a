"""A launch running in the background for a display: ``LiveLaunch`` runs the launch job
(``runtime.job.execute``: torchrun, its ranks, the run log) on a thread of its own and
answers ``view()`` with the latest frame of a ``LaunchWatch``.

The display polls ``view()`` at its own pace (the app: four times a second), so updates
are coalesced however often ranks report. ``stop()`` ends every rank (the run log gets
its final record); so does the app quitting.
"""

from __future__ import annotations

import time

from flextui.runtime.job import Prepared, execute
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import RankRecord
from flextui.runtime.stepfigures import ModelWork, StepJoin
from flextui.runtime.summary import RunSummary, device_labels
from flextui.session.jobs import BackgroundJob, JobState
from flextui.session.launch_watch import LaunchView, LaunchWatch

#: the state a launch ends in, by how its run ended
ENDED_AS = {RunStatus.FINISHED: JobState.FINISHED, RunStatus.STOPPED: JobState.STOPPED,
            RunStatus.FAILED: JobState.FAILED}


class LiveLaunch(BackgroundJob):
    thread_name = "flextui-launch"

    def __init__(self, prepared: Prepared, label: str = "") -> None:
        super().__init__()
        self.prepared = prepared
        self.label = label or prepared.spec.strategy.name
        cluster, spec = prepared.cluster, prepared.spec
        self._watch = LaunchWatch(device_labels(cluster, spec.graph, spec.strategy),
                                  [d.spec.memory_bytes for d in cluster.devices],
                                  spec.graph.batch_size, spec.training.steps,
                                  spec.training.warmup, prepared.simulated,
                                  StepJoin(spec.num_ranks, ModelWork.of(spec, cluster),
                                           spec.training))
        self._started = 0.0
        self.outcome: Outcome | None = None
        self.summary: RunSummary | None = None
        self.error: str | None = None

    def view(self, lines: int = 200) -> LaunchView:
        with self._lock:
            elapsed = time.monotonic() - self._started if self._started else 0.0
            if self.outcome is not None:
                elapsed = self.outcome.elapsed_s
            message = self.error or (self.outcome.message if self.outcome else None)
            failed = self.outcome.failed_rank if self.outcome else None
            return self._watch.view(self._state, elapsed, message, failed, lines)

    def _work(self) -> None:
        with self._lock:
            self._started = time.monotonic()
            self._state = JobState.RUNNING
        outcome, summary, _ = execute(self.prepared, self._stop, self._record, self._output)
        with self._lock:
            self.outcome, self.summary = outcome, summary
            self._state = ENDED_AS[outcome.status]

    def _failed(self, message: str) -> None:
        with self._lock:
            self.error, self._state = message, JobState.FAILED

    def _record(self, record: RankRecord) -> None:
        with self._lock:
            self._watch.record(record)

    def _output(self, rank: int, line: str) -> None:
        with self._lock:
            self._watch.output(rank, line)
