"""Long work on a thread of its own, for a display that polls it (the app's searches and
profiles): a state that only moves forward, a stop request, and failures turned into a
message (never an exception escaping the thread), so the display can report them.
What such a job is doing, and what its display says it is doing, is a ``JobState``."""

from __future__ import annotations

import threading
import traceback
from enum import StrEnum
from pathlib import Path

from flextui.errors import FlextuiError


class JobState(StrEnum):
    """The state of a background job (a search, a profile, a launch) or of a replay, as
    its view reports it; the value is what a display shows."""

    STARTING = "starting"
    WAITING = "waiting"      # a profile waiting for an earlier one to let the device go
    RUNNING = "running"
    PAUSED = "paused"        # a search, or a replay
    FINISHED = "finished"
    STOPPED = "stopped"      # asked to stop, what was done kept
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in (JobState.FINISHED, JobState.STOPPED, JobState.FAILED)


class BackgroundJob:
    """Subclasses implement ``_work`` (on the job's thread; it should return soon after
    ``_stop`` is set) and ``_failed(message)``; they guard their own figures with
    ``_lock``. ``_state`` starts as ``STARTING`` and ends in an ``ended`` state."""

    thread_name = "flextui-job"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = JobState.STARTING

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} has already been started")
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the work to end; safe from any thread, and after it has ended."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the work to end; True if it has, its thread with it (so what the
        work held, a GPU's memory say, has been let go)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.done and (self._thread is None or not self._thread.is_alive())

    @property
    def done(self) -> bool:
        return self._state.ended

    def _run(self) -> None:
        try:
            self._work()
        except FlextuiError as exc:
            self._failed(str(exc))
        except Exception as exc:  # noqa: BLE001 (a bug: report it with where it came from)
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self._failed(f"internal error: {exc!r} at {Path(where.filename).name}:"
                         f"{where.lineno}")

    def _work(self) -> None:
        raise NotImplementedError

    def _failed(self, message: str) -> None:
        raise NotImplementedError
