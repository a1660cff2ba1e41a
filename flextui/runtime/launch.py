"""Starting a run with torchrun on this machine and following it to its end.

torchrun (``python -m torch.distributed.run``, through ``runtime.rendezvous``) starts
one worker per rank, meeting on a free port of the loopback address, with
``--max-restarts 0``; its output, the ranks' own lines tagged ``[rankN]:`` with their
global rank (``--tee``, ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``),
is read on a thread: metrics records go to ``on_record``, decoded and checked
(``metrics.read_line``), every other line to ``on_output``, and the last lines of each
rank are kept to name what a failed rank said. A line that starts as a record and is
not one is passed on as output, with a line saying why it was skipped: the reader never
stops reading, so torchrun never blocks on a full pipe.

Teardown. torchrun runs under a small guard (``guard``) in a session of their own, so
stopping a run (Ctrl-C, SIGTERM, SIGHUP, the app quitting) signals their process group:
SIGTERM, then SIGKILL after a grace period; what torchrun says then (its traceback of
the signal) is not shown. The guard holds a pipe from the launcher and ends torchrun
when the pipe closes, so torchrun ends at once with a launcher killed outright; each
rank also watches its parent and the launcher (``worker``), so no rank outlives either.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from flextui.runtime.metrics import Failed, RankRecord, RecordError, Start, read_line
from flextui.runtime.rendezvous import BACKEND
from flextui.runtime.spec import LAUNCHER_PID
from flextui.runtime.target import LOOPBACK, loopback_interface

GRACE_S = 5.0
TAIL_LINES = 20
#: torchrun's template of the tag before each of a rank's lines (``string.Template``)
LINE_PREFIX = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
_RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$")
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


class RunStatus(StrEnum):
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Torchrun:
    """One node's torchrun: ``plan`` (the launch plan file) on ``ranks`` local
    processes, its logs under ``log_dir``, node ``node_rank`` of ``nnodes`` meeting the
    others at ``master``:``port`` (one node: this machine's loopback) under ``run_id``.
    torchrun runs through ``flextui.runtime.rendezvous``, whose rendezvous store on node
    0 listens on ``master`` alone; the nodes are numbered as the launch gives them, so
    device *i* of the cluster is global rank *i* on the host its node names."""

    plan: Path
    ranks: int
    port: int
    run_id: str
    log_dir: Path
    master: str = LOOPBACK
    nnodes: int = 1
    node_rank: int = 0
    #: what each rank runs, with the plan's path after it
    entry: tuple[str, ...] = ("-m", "flextui.runtime.worker")

    def command(self) -> list[str]:
        endpoint = f"[{self.master}]" if ":" in self.master else self.master
        return [sys.executable, "-m", "flextui.runtime.rendezvous",
                "--nnodes", str(self.nnodes), "--rdzv-backend", BACKEND,
                "--rdzv-conf", f"rank={self.node_rank}", "--nproc-per-node", str(self.ranks),
                "--rdzv-endpoint", f"{endpoint}:{self.port}", "--rdzv-id", self.run_id,
                "--max-restarts", "0", "--role", "rank", "--tee", "3",
                "--log-dir", str(self.log_dir), *self.entry, str(self.plan)]

    def environment(self, launcher_pid: int) -> dict[str, str]:
        """What the launch adds to the environment: the launcher's PID (ranks watch it),
        one thread per rank unless asked otherwise, unbuffered output, each rank's lines
        tagged with its global rank (torchrun's default tag is the local rank, the same
        on every node); on one node, the ranks' own sockets (gloo's, NCCL's) on the
        loopback interface."""
        env = {LAUNCHER_PID: str(launcher_pid),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "PYTHONUNBUFFERED": "1", LINE_PREFIX: "[rank${rank}]:"}
        loopback = loopback_interface() if self.nnodes == 1 else None
        if loopback is not None:
            env |= {"GLOO_SOCKET_IFNAME": loopback, "NCCL_SOCKET_IFNAME": loopback}
        return env


def free_port() -> int:
    """A TCP port nobody listens on now, on any address of this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` on any address of this machine (bound, never
    listened on, so nothing is reachable while it is asked)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its status, torchrun's exit code, the rank that failed first
    (when known) and a one-line message saying what happened (a run log's final
    record)."""

    status: RunStatus
    exit_code: int
    failed_rank: int | None
    message: str
    elapsed_s: float

    def to_dict(self) -> dict[str, object]:
        return {"status": str(self.status), "exit_code": self.exit_code,
                "failed_rank": self.failed_rank, "message": self.message,
                "elapsed_s": self.elapsed_s}


@dataclass
class _FailureBlock:
    """Where the reading of one torchrun's summary of failed ranks is: in its root cause
    section or not, and the rank of the entry being read."""

    root: bool
    rank: int | None = None


class RankOutput:
    """torchrun's output, line by line: metrics records go to ``on_record``, every other
    line to ``on_output`` (rank -1: torchrun's own), and enough is kept to say which rank
    failed first and what it said.

    The first cause is a rank a signal ended (its exit status in torchrun's summary of
    failed ranks): a rank killed outright (the kernel's OOM killer, ``kill -9``) writes
    no record, while the peers whose connections to it broke raise at once and report
    their failures first. Then the ranks' ``failed`` records (the earliest by the ranks'
    clocks), then the root cause torchrun names; with each rank's last lines."""

    def __init__(self, on_record: Callable[[RankRecord], None],
                 on_output: Callable[[int, str], None],
                 host_of: Callable[[int], str] = lambda rank: "localhost") -> None:
        self.on_record, self.on_output = on_record, on_output
        self.host_of = host_of
        self.worker_pids: dict[int, int] = {}
        self.failures: list[Failed] = []
        self._lines: dict[int, collections.deque] = {}
        self.exits: dict[int, int] = {}   # rank -> exit status, from torchrun's summary
        self._root_rank: int | None = None
        self._blocks: dict[str, _FailureBlock] = {}   # per source: each host's torchrun
        self._stopping = False
        self.error: Exception | None = None   # the first a callback raised

    def stopping(self) -> None:
        """The launcher is stopping the run: torchrun's own lines from now on are what
        it says of the signal (a traceback), and are not passed on."""
        self._stopping = True

    def feed(self, line: str, source: str = "") -> None:
        """One line of output; ``source`` (a host) prefixes an untagged line shown. It
        never raises: the first exception of a callback (a display that cannot write) is
        kept in ``error`` and the reading goes on, or torchrun would block on the pipe."""
        try:
            self._feed(line, source)
        except Exception as exc:  # noqa: BLE001 (kept and raised when the run has ended)
            self.error = self.error or exc

    def _feed(self, line: str, source: str) -> None:
        tagged = _RANK_LINE.match(line)
        rank = int(tagged[1]) if tagged else -1
        text = tagged[2] if tagged else line
        try:
            record = read_line(text, f"rank {rank}'s record") if tagged else None
        except RecordError as bad:
            self._show(rank, text)
            self._show(-1, f"flextui: skipped a record of rank {rank}: {bad}")
            return
        if record is None and not tagged and self._stopping:
            return
        if record is None:
            self._remember(rank, text, source)
            self.on_output(rank, f"{source}: {text}" if source and not tagged else text)
            return
        if isinstance(record, Start):
            self.worker_pids[record.rank] = record.pid
        elif isinstance(record, Failed):
            self.failures.append(record)
        self.on_record(record)

    def first_failure(self) -> Failed | None:
        """The ``failed`` record of the rank that failed first, by the ranks' clocks."""
        return min(self.failures, key=lambda r: r.time, default=None)

    def killed(self) -> int | None:
        """The rank a signal ended that torchrun did not send (it stops the other ranks
        with SIGTERM): torchrun's root cause if it is one, else the lowest."""
        killed = [rank for rank, code in self.exits.items()
                  if code < 0 and -code != signal.SIGTERM]
        return self._root_rank if self._root_rank in killed else min(killed, default=None)

    def failure(self, code: int) -> tuple[int | None, str]:
        """The rank that failed first (None: not known) and a line saying so: the
        signal that ended it, or what it raised, else its last line."""
        killed = self.killed()
        first = self.first_failure() if killed is None else None
        rank = killed if killed is not None else first.rank if first else self._root_rank
        said = [line.strip() for line in self._lines.get(rank if rank is not None else -1, [])
                if line.strip()]
        last = first.error if first and first.error else said[-1] if said else "no output"
        if rank is None:
            return None, f"torchrun failed (exit code {code}): {last}"
        # a rank that raised is then stopped by torchrun (SIGTERM): not what ended it
        why = _why(said, None if first is not None else self.exits.get(rank))
        return rank, f"rank {rank} on {self.host_of(rank)} failed{why}: {last}"

    def _show(self, rank: int, text: str) -> None:
        self._remember(rank, text)
        self.on_output(rank, text)

    def _remember(self, rank: int, text: str, source: str = "") -> None:
        """Keep a rank's last lines; read torchrun's summary of failed ranks (``source``
        tells the hosts' torchruns apart): each entry's rank and exit status."""
        self._lines.setdefault(rank, collections.deque(maxlen=TAIL_LINES)).append(text)
        if rank != -1:
            return
        if "Failures:" in text or "Root Cause" in text:
            self._blocks[source] = _FailureBlock(root="Root Cause" in text)
            return
        block = self._blocks.get(source)
        if block is None:
            return
        found, code = _FAILED_RANK.match(text), _EXIT_CODE.match(text)
        if found:
            block.rank = int(found[1])
            if block.root and self._root_rank is None:
                self._root_rank = block.rank
        elif code and block.rank is not None:
            self.exits.setdefault(block.rank, int(code[1]))


def end_process_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the process group ``proc`` leads (started with a session of its own),
    SIGKILL after ``grace_s`` if it is still there; returns when it has ended."""
    if proc.poll() is not None:
        return
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class Run:
    """A torchrun launch on this machine in progress."""

    def __init__(self, torchrun: Torchrun, on_record: Callable[[RankRecord], None],
                 on_output: Callable[[int, str], None]) -> None:
        self.torchrun = torchrun
        self.output = RankOutput(on_record, on_output)
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._started = 0.0
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def worker_pids(self) -> dict[int, int]:
        return self.output.worker_pids

    def start(self) -> None:
        self.torchrun.log_dir.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        # stdin: the pipe whose end (this process's, however it ends) ends the guard's group
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "flextui.runtime.guard", *self.torchrun.command()],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
            text=True, errors="replace", start_new_session=True,
            env={**os.environ, **self.torchrun.environment(os.getpid())})
        assert self._proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                        name="flextui-launch-output", daemon=True)
        self._reader.start()

    def wait(self, stop: threading.Event | None = None) -> Outcome:
        """Follow the run to its end; when ``stop`` is set, stop it first."""
        assert self._proc is not None, "start the run first"
        while self._proc.poll() is None:
            if stop is not None and stop.is_set() and not self._stopped:
                self.stop()
            time.sleep(0.05)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        if self.output.error is not None:
            raise self.output.error
        return self._outcome(self._proc.returncode)

    def stop(self) -> None:
        """End every process of the run: SIGTERM to torchrun's group, SIGKILL after
        GRACE_S, then to any rank that is still there."""
        self._stopped = True
        self.output.stopping()
        if self._proc is not None:
            end_process_group(self._proc)
        kill_pids(self.worker_pids.values())

    def _read(self, stream: IO[str]) -> None:
        for raw in stream:
            self.output.feed(raw.rstrip("\n"))

    def _outcome(self, code: int) -> Outcome:
        elapsed = time.monotonic() - self._started
        if self._stopped:
            return Outcome(RunStatus.STOPPED, code, None, "stopped; every rank ended", elapsed)
        if code == 0:
            return Outcome(RunStatus.FINISHED, 0, None, f"finished in {elapsed:.1f} s", elapsed)
        rank, message = self.output.failure(code)
        return Outcome(RunStatus.FAILED, code, rank, message, elapsed)


def _why(lines: list[str], exit_code: int | None) -> str:
    text = " ".join(lines)
    if "OutOfMemoryError" in text or "MemoryError" in text:
        return " (out of memory)"
    if exit_code is None or exit_code >= 0:
        return ""
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = "a signal"
    hint = "; out of memory?" if exit_code == -signal.SIGKILL else ""
    return f" (killed by {name}, signal {-exit_code}{hint})"
