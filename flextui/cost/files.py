"""Writing cache files safely: whole-file atomic replacement and an advisory lock.

Profile caches and communication calibrations are shared by processes that may run at
once (two profilers on one login node, a search reading while a profiler writes). A
writer takes ``file_lock(path)``, re-reads the file, adds its entries and replaces the
file with ``atomic_write``, so readers see the old file or the new one, never half of
one, and no writer loses another's entries.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file in the same directory, flushed
    to disk, then renamed over it (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock for ``path`` (on ``<path>.lock``, so the lock
    survives the file being replaced) until the block ends."""
    lock = Path(f"{os.fspath(path)}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
