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


def listening(pids) -> list[tuple[str, int, int]]:
    """The TCP sockets the processes ``pids`` listen on, as (address, port, pid): read
    from /proc/net/tcp and tcp6 (addresses as the kernel keeps them) and each process's
    open descriptors (``socket:[inode]``)."""
    owner = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        owner[target[8:-1]] = pid
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in owner:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append((_address(address), int(port, 16), owner[fields[9]]))
    return found


def _address(hex_words: str) -> str:
    """An address of /proc/net/tcp{,6}: 32-bit words in the host's (little-endian) order."""
    import ipaddress
    raw = b"".join(bytes.fromhex(hex_words[i:i + 8])[::-1] for i in range(0, len(hex_words), 8))
    return str(ipaddress.ip_address(raw))

