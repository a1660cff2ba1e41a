"""Processes a test started, ended and checked by their PIDs (never by name)."""

import contextlib
import os
import signal
import time
from pathlib import Path

from helpers import HANG_S


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids, timeout: float = HANG_S) -> list[int]:
    """The PIDs still alive after ``timeout`` seconds (reaped zombies count as gone): by
    default none but after a hang, however slow the machine."""
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


class Follow:
    """Runs a prepared launch (``runtime.job.execute``) on a thread, keeping its run and
    records, so a test can act mid-run and then check every process of it is gone; as
    a context, ends them all however the test ends."""

    def __init__(self, prepared) -> None:
        import threading

        self.stop = threading.Event()
        self.records: list = []   # the ranks' records (runtime.metrics), as they came
        self.run = None
        self.result = None
        self.thread = threading.Thread(target=self._go, args=(prepared,), daemon=True)
        self.thread.start()

    def _go(self, prepared) -> None:
        from flextui.runtime.job import execute

        self.result = execute(prepared, self.stop, self.records.append,
                              on_start=lambda run: setattr(self, "run", run))

    def wait_for(self, kind: str, ranks: int, timeout: float = HANG_S) -> None:
        """Until every one of ``ranks`` ranks has sent a ``kind`` record (a failure
        when the launch ends first, or after ``timeout`` seconds: a hang)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if len({r.rank for r in list(self.records) if r.kind == kind}) == ranks:
                return
            time.sleep(0.1)
        raise AssertionError(f"the ranks did not send {kind!r}: {self.records[-3:]}")

    def wait_for_steps(self, ranks: int = 4) -> None:
        self.wait_for("steps", ranks)

    def pids(self) -> list[int]:
        """Every process of the launch known here: over hosts the ssh sessions, node
        programs and torchruns, else torchrun; and the ranks."""
        assert self.run is not None
        own = ([pid for group in self.run.pids().values() for pid in group]
               if hasattr(self.run, "pids") else [self.run.pid])
        return own + list(self.run.worker_pids.values())

    def finish(self, timeout: float = HANG_S):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the launch did not end"
        return self.result

    def __enter__(self) -> "Follow":
        return self

    def __exit__(self, *_) -> None:
        """However the test ended: the launch stopped, every process of it killed."""
        self.stop.set()
        self.thread.join(30)
        end(self.pids() if self.run else [])


def children(parent: int | None = None, running: str = "") -> list[int]:
    """The PIDs of the children of ``parent`` (default: this process) alive now (not
    zombies) whose command line holds ``running`` (a test's own, among others a test
    worker may have)."""
    me = str(parent or os.getpid())
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            after = stat.read_text().split(") ")[1].split()
            command = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
            if after[1] == me and after[0] != "Z" and running in command:
                found.append(int(stat.parent.name))
    return found


def torchrun_rows(script: Path, ranks: int) -> list[dict]:
    """Run ``script`` under torchrun on ``ranks`` local gloo ranks (one thread each) and
    return the JSON lines its ranks printed; the launch's process group is killed after,
    whatever happened."""
    import json
    import subprocess
    import sys

    from flextui.runtime.launch import free_port
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(ranks), "--rdzv-backend", "c10d", "--rdzv-endpoint",
               f"localhost:{free_port()}", "--max-restarts", "0", str(script)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-4000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
