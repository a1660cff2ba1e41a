"""Processes a test started, ended and checked by their PIDs (never by name)."""

import contextlib
import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids, timeout: float = 20.0) -> list[int]:
    """The PIDs still alive after ``timeout`` seconds (reaped zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p) and not _zombie(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p) and not _zombie(p)]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return False


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])


def end(pids) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
