"""The search log as a file: one writer at a time, appends that leave whole records, and
scanning the framed records back (damage told apart from a tail cut short).

Locking rule. A process writing a log (a new search or a resumed one) holds an exclusive
advisory lock (``flock``) on the log for as long as its writer is open; the kernel drops
it when the process ends, however it ends, so a lock never outlives its writer. While it
holds the lock, the writer's PID is in ``FILE.ffsearch.lock`` (removed when the writer
closes; one left by a killed writer is only ever read to name a holder, never trusted to
block). A new log is created exclusively (``O_CREAT | O_EXCL``): an existing file is never
truncated. Reading a log takes no lock (a reader sees complete records and a torn tail).

Appending. A failed write (a full disk, a file size limit) cuts the file back to the last
whole record it holds before it reports, so the log stays readable.

Damage. A record whose checksum fails is damage, unless the file from a 512-byte boundary
inside that record to its end is all zeros: that is what a machine losing power leaves (the
file's last blocks allocated but never written), and it reads as a tail cut short.
"""

from __future__ import annotations

import binascii
import contextlib
import fcntl
import os
import shlex
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from flextui.cost.files import atomic_write
from flextui.errors import SearchLogError
from flextui.search.logformat import FRAME, HEAD_CRC_INIT

LOCK_SUFFIX = ".lock"
#: zeros from a multiple of this to the end of the file are a lost tail, not damage
#: (the smallest block a disk writes; pages and filesystem blocks are multiples of it)
SECTOR = 512
LOCK_TRIES, LOCK_RETRY_S = 10, 0.02


class LogWriteError(SearchLogError):
    """The disk refused a write to a search log (full, or over a file size limit)."""


class LogFile:
    """A search log open for appending, locked for as long as it is open."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd
        self._pid_file = Path(f"{path}{LOCK_SUFFIX}")
        self.size = os.fstat(fd).st_size
        self._closed = False

    @classmethod
    def create(cls, path: str | Path) -> LogFile:
        """A new, empty log at ``path``; an existing file is refused, never truncated."""
        path = Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            if lock_holder(path) is not None:
                raise SearchLogError(_busy(path, "write the new log elsewhere")) from None
            raise SearchLogError(f"{path} exists; a search log is never overwritten: continue "
                                 f"it with flextui search --resume {shlex.quote(str(path))}, "
                                 "or write the new log elsewhere") from None
        except OSError as exc:
            raise SearchLogError(f"cannot write search log {path}: "
                                 f"{exc.strerror or exc}") from None
        return cls._locked(path, fd, "write the new log elsewhere")

    @classmethod
    def reopen(cls, path: str | Path) -> LogFile:
        """The existing log at ``path``, to append to."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            raise SearchLogError(f"cannot reopen search log {path}: "
                                 f"{exc.strerror or exc}") from None
        return cls._locked(path, fd, "wait for it to end before resuming it")

    @classmethod
    def _locked(cls, path: Path, fd: int, advice: str) -> LogFile:
        try:
            _lock(fd)
        except BlockingIOError:
            os.close(fd)
            raise SearchLogError(_busy(path, advice)) from None
        except OSError as exc:
            os.close(fd)
            raise SearchLogError(f"cannot lock search log {path}: "
                                 f"{exc.strerror or exc}") from None
        log = cls(path, fd)
        with contextlib.suppress(OSError):  # the PID only names the holder to others
            atomic_write(log._pid_file, f"{os.getpid()}\n".encode())
        return log

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self.size = size

    def append(self, records: list[bytes]) -> None:
        """Write ``records`` (whole frames) at the end. If the disk refuses them, the file
        is cut back to the last whole record written and LogWriteError says why."""
        data = b"".join(records)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            kept = 0
            for record in records:          # the records that reached the file whole
                if kept + len(record) > written:
                    break
                kept += len(record)
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size + kept)
            self.size += kept
            raise LogWriteError(f"cannot write search log {self.path}: "
                                f"{exc.strerror or exc}") from None
        self.size += written

    def close(self, remove: bool = False) -> None:
        """Remove the PID file (and with ``remove`` the log) and release the lock."""
        if self._closed:
            return
        self._closed = True
        for path in (self._pid_file, self.path) if remove else (self._pid_file,):
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(self._fd)              # closing the file releases the lock


def _lock(fd: int) -> None:
    """Take the writer's lock, or raise BlockingIOError if a writer holds it. A few quick
    retries let a momentary holder (another process asking :func:`lock_holder`) pass."""
    for _ in range(LOCK_TRIES - 1):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_RETRY_S)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def lock_holder(path: str | Path) -> str | None:
    """Who writes the log at ``path`` now: "process N" (or "another process" when its PID
    is unknown), or None when no writer holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_pid(Path(f"{path}{LOCK_SUFFIX}"))
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _holder_pid(pid_file: Path) -> str:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)                     # raises if no such process (a stale PID file)
    except PermissionError:
        return f"process {pid}"             # alive, another user's
    except (OSError, ValueError):
        return "another process"
    return f"process {pid}"


def _busy(path: Path, advice: str) -> str:
    holder = lock_holder(path) or "another process"
    return f"{path} is being written by another search ({holder}); {advice}"


# -- reading ----------------------------------------------------------------------------


@dataclass
class Frames:
    """The framed records of a log's bytes, in order, each with its start offset."""

    bodies: list[tuple[int, bytes]]
    end: int            # where the last complete record ends
    truncated: bool     # bytes after ``end`` are a tail cut short (or zeroed), not records


def scan_frames(data: bytes, start: int, path: Path) -> Frames:
    """Check and split the frames of ``data`` from offset ``start``. A frame cut off by
    the end of the data, or damaged only by a zero-filled tail, ends the scan as truncated;
    any other checksum failure raises SearchLogError naming the record and its offset."""
    bodies: list[tuple[int, bytes]] = []
    pos, size = start, len(data)
    written = _nonzero_end(data)
    zeros = min(-(-written // SECTOR) * SECTOR, size)   # where an aligned zero tail starts
    while pos < size:
        if size - pos < FRAME.size:
            return Frames(bodies, pos, True)
        length, body_crc, head_crc = FRAME.unpack_from(data, pos)
        end = pos + FRAME.size + length
        if binascii.crc_hqx(data[pos:pos + 8], HEAD_CRC_INIT) != head_crc:
            if written <= pos or zeros < pos + FRAME.size:
                return Frames(bodies, pos, True)
            raise SearchLogError(f"{path}: record {len(bodies)} at byte {pos} is corrupt (bad "
                                 f"frame checksum); the file is damaged")
        if end > size:
            return Frames(bodies, pos, True)
        body = data[pos + FRAME.size:end]
        if zlib.crc32(body) != body_crc:
            if zeros < end:
                return Frames(bodies, pos, True)
            raise SearchLogError(f"{path}: record {len(bodies)} at byte {pos} is corrupt "
                                 f"(checksum mismatch); the file is damaged")
        bodies.append((pos, body))
        pos = end
    return Frames(bodies, pos, False)


def _nonzero_end(data: bytes) -> int:
    """The offset just after the last non-zero byte of ``data`` (0 if it is all zeros)."""
    end = len(data)
    while end:
        start = max(0, end - 65536)
        kept = len(data[start:end].rstrip(b"\0"))
        end = start + kept
        if kept:
            break
    return end
