"""Profiling in the background for a display: ``LiveProfile`` runs ``profile_tasks`` on
its own thread, counts what it does under a lock, and answers ``view()`` with the
latest figures, so the caller (the app, a few times a second) never waits on a kernel.
Stopping ends after the task in flight; what was measured is saved. A profile started
while earlier ones are still ending (``after``: their screen was left, which only asks
them to stop) waits on its own thread for them to end before it measures, so two runs
never share a device: their kernels would slow each other, and the allocator's peak
memory statistics are the process's, not a run's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flextui.cost.compare import OpTypeComparison
from flextui.cost.estimate import ProfileClock
from flextui.graph import OpGraph
from flextui.session.jobs import BackgroundJob, JobState

if TYPE_CHECKING:
    from flextui.cost.profile import ProfileEvent

#: how often a profile waiting for an earlier one checks whether it was asked to stop
WAIT_POLL_S = 0.1
#: notices shown at most (the device's, the cache's, then blocks that could not run)
MAX_NOTICES = 6


@dataclass(frozen=True)
class ProfileView:
    state: JobState
    device: str
    done: int
    total: int
    measured: int
    cached: int
    oom: int
    elapsed: float
    current: str                # the last task: op type and block
    notices: tuple[str, ...]
    message: str | None = None  # why it failed
    cache_path: str | None = None
    remaining_s: float | None = None  # the time left, estimated (``cost.estimate``)

    @property
    def progress(self) -> float:
        return self.done / self.total if self.total else 0.0


class LiveProfile(BackgroundJob):
    thread_name = "flextui-profile"

    def __init__(self, graph: OpGraph, num_devices: int, *, device: str | None = None,
                 dtype: str = "fp32", training: bool = True, profiles: str | None = None,
                 warmup: int = 2, repeats: int = 10,
                 after: Sequence[BackgroundJob] = ()) -> None:
        super().__init__()
        self.graph, self.num_devices = graph, num_devices
        self._after = tuple(after)
        self._settings = (device, dtype, training, profiles, warmup, repeats)
        self._device = ""
        self._message: str | None = None
        self._done = self._total = self._measured = self._cached = self._oom = 0
        self._current = ""
        self._notices: tuple[str, ...] = ()
        self._cache_path: str | None = None
        self._clock: ProfileClock | None = None      # set, with when measuring began,
        self._measuring_since = 0.0                  # once the tasks are known
        self._started = time.monotonic()
        self._ended: float | None = None
        self.comparison: list[OpTypeComparison] = []

    def start(self) -> None:
        self._started = time.monotonic()
        super().start()

    def view(self) -> ProfileView:
        with self._lock:
            elapsed = (self._ended or time.monotonic()) - self._started
            remaining = self._clock.remaining_s if self._clock and not self.done else None
            return ProfileView(self._state, self._device, self._done, self._total,
                               self._measured, self._cached, self._oom, elapsed,
                               self._current, self._notices, self._message, self._cache_path,
                               remaining)

    # -- the profiling thread -----------------------------------------------------------

    def _work(self) -> None:
        for earlier in self._after:
            if not earlier.done:
                with self._lock:
                    self._state = JobState.WAITING
            while not earlier.join(timeout=WAIT_POLL_S):
                if self._stop.is_set():
                    self._end(JobState.STOPPED)
                    return
        from flextui.cost.profile import prepare_profile  # imported here: it imports torch
        device, dtype, training, profiles, warmup, repeats = self._settings
        run = prepare_profile(self.graph, self.num_devices, device=device, dtype=dtype,
                              training=training, profiles=profiles)
        clock = run.clock(warmup=warmup, repeats=repeats)
        with self._lock:
            self._device, self._total = run.local.name, len(run.signatures)
            self._state = JobState.RUNNING
            self._notices, self._cache_path = tuple(run.notices), str(run.cache.path)
            self._clock, self._measuring_since = clock, time.monotonic()
        run.run(warmup=warmup, repeats=repeats, on_event=self._take, stop=self._stop.is_set)
        self.comparison = run.comparison()
        self._end(JobState.STOPPED if self._stop.is_set() else JobState.FINISHED)

    def _take(self, event: ProfileEvent) -> None:
        with self._lock:
            assert self._clock is not None  # set before the first task is measured
            self._clock.task_done(event.done - 1, time.monotonic() - self._measuring_since)
            self._done = event.done
            self._cached += event.cached
            self._measured += not event.cached
            self._oom += event.entry.oom
            block = "×".join(map(str, event.signature.block))
            self._current = f"{event.signature.op.type} {block}"
            if event.failure and len(self._notices) < MAX_NOTICES:
                self._notices += (f"{self._current} could not run: {event.failure}",)

    def _failed(self, message: str) -> None:
        self._end(JobState.FAILED, message)   # what was measured before is saved

    def _end(self, state: JobState, message: str | None = None) -> None:
        with self._lock:
            self._state, self._message, self._ended = state, message, time.monotonic()
