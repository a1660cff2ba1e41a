"""Long work on a thread of its own, for a display that polls it (the app's searches and
profiles): a state that only moves forward, a stop request, and failures turned into a
message (never an exception escaping the thread), so the display can report them."""

from __future__ import annotations

import threading
import traceback
from pathlib import Path

from flextui.errors import FlextuiError

ENDED = ("finished", "stopped", "failed")


class BackgroundJob:
    """Subclasses implement ``_work`` (on the job's thread; it should return soon after
    ``_stop`` is set) and ``_failed(message)``; they guard their own figures with
    ``_lock``. ``_state`` starts as "starting" and ends in one of ``ENDED``."""

    thread_name = "flextui-job"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "starting"

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
        return self._state in ENDED

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
