"""A search running in the background for a display: ``LiveSearch`` runs ``run_search``
on its own thread (the chains in worker processes, so the caller's thread stays free),
feeds a ``SearchWatch`` under a lock, and answers ``view()`` with the latest frame.

The caller polls ``view()`` at its own pace (the app: a few times a second), so updates
are coalesced however fast the search runs. Pause, resume and stop are safe from any
thread; stopping keeps the best found, and the log (if any) gets its final record. A
search asked to pause reports PAUSED once every chain has said it waits, each having
handed on every step it made: from then on its steps do not change until it resumes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from flextui.cost.model import CostModel
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.baselines import baseline_costs
from flextui.search.events import RestartEvent, StepEvent, StopReason
from flextui.search.log import SearchLog
from flextui.search.logformat import Checkpoint
from flextui.search.options import SearchOptions
from flextui.search.runner import SearchResult, run_search
from flextui.session.jobs import BackgroundJob, JobState
from flextui.session.search_watch import SearchView, SearchWatch
from flextui.strategy import Strategy


class LiveSearch(BackgroundJob):
    thread_name = "flextui-search"

    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 options: SearchOptions, *, log_path: str | Path | None = None,
                 initial: Strategy | None = None, resume: SearchLog | None = None,
                 processes: bool = True) -> None:
        self.graph, self.cluster = graph, cluster
        self.cost_model, self.options = cost_model, options
        self.log_path = Path(log_path) if log_path is not None else None
        self._initial, self._resume, self._processes = initial, resume, processes
        super().__init__()
        self._watch = SearchWatch(graph, options.iterations, options.time_limit, options.chains)
        self._pause = threading.Event()
        self._held = False     # every running chain waits, its steps all taken
        self._baselines: dict[str, float] = {}
        self.result: SearchResult | None = None
        self.error: str | None = None
        self._logged = False

    # -- control (any thread) -----------------------------------------------------------

    def toggle_pause(self) -> bool:
        """Ask a running search to pause (it is PAUSED once its chains wait), or resume
        a paused or pausing one; True if it is asked to pause now."""
        with self._lock:
            if self._state == JobState.RUNNING and not self._pause.is_set():
                self._pause.set()
                self._state = JobState.PAUSED if self._held else JobState.RUNNING
            elif self._state in (JobState.RUNNING, JobState.PAUSED):
                self._pause.clear()
                self._state = JobState.RUNNING
            return self._pause.is_set()

    def stop(self) -> None:
        """Stop the search (a paused one too); the best found is kept."""
        super().stop()
        self._pause.clear()

    def view(self) -> SearchView:
        with self._lock:
            reason = self.result.reason if self.result else None
            return self._watch.view(self._state, self._baselines, reason, self.error)

    # -- the search thread --------------------------------------------------------------

    def _work(self) -> None:
        baselines = baseline_costs(self.graph, self.cluster, self.cost_model, self.options)
        with self._lock:
            self._baselines = baselines
            if self._state == JobState.STARTING:
                self._state = JobState.PAUSED if self._pause.is_set() else JobState.RUNNING
        result = run_search(self.graph, self.cluster, self.cost_model, self.options,
                            initial=self._initial, log_path=self.log_path,
                            resume=self._resume, on_events=self._take,
                            on_reset=self._reset, stop=self._stop, pause=self._pause,
                            on_held=self._on_held, processes=self._processes,
                            baselines=baselines)
        self._end(JobState.STOPPED if result.reason == StopReason.INTERRUPTED
                  else JobState.FINISHED, result)

    def _failed(self, message: str) -> None:
        """The log, if this search started one, is kept as written, and the message says
        where (a log that could not be created, another search's say, is not named)."""
        if self.log_path is not None and self._logged:
            message = f"{message}\n\nThe log is kept: {self.log_path}"
        self._end(JobState.FAILED, message=message)

    def _end(self, state: JobState, result: SearchResult | None = None,
             message: str | None = None) -> None:
        with self._lock:
            self.result, self.error, self._state = result, message, state

    def _on_held(self, held: bool) -> None:
        with self._lock:
            self._held = held
            if self._pause.is_set() and self._state in (JobState.RUNNING, JobState.PAUSED):
                self._state = JobState.PAUSED if held else JobState.RUNNING

    def _take(self, steps: list[StepEvent]) -> None:
        now = time.monotonic()
        with self._lock:
            self._watch.take(steps, now)

    def _reset(self, item: Checkpoint | RestartEvent) -> None:
        with self._lock:
            self._logged = True    # a chain's first checkpoint: the log has been created
            self._watch.reset(item)
