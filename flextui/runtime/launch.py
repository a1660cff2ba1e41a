"""Starting a run with torchrun on this machine and following it to its end.

torchrun (``python -m torch.distributed.run``, through ``runtime.rendezvous``) starts
one worker per rank, meeting on a free port of the loopback address, with
``--max-restarts 0``; its output, the ranks' own lines tagged ``[rankN]:`` with their
global rank (``--tee``, ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``), is read on a
thread (``rankoutput.RankOutput``): metrics records go to ``on_record``, decoded and checked
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

import contextlib
import os
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

from flextui.runtime.interfaces import SOCKET_IFNAMES, interface_toward
from flextui.runtime.metrics import RankRecord
from flextui.runtime.rankoutput import RankOutput
from flextui.runtime.rendezvous import BACKEND
from flextui.runtime.spec import LAUNCHER_PID
from flextui.runtime.target import LOOPBACK

GRACE_S = 5.0
#: torchrun's template of the tag before each of a rank's lines (``string.Template``)
LINE_PREFIX = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"


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
        on every node), and the interface the ranks' own sockets (gloo's, NCCL's) listen
        on: the one holding this host's address toward ``master`` (on one node, the
        loopback; over hosts, unless this host's environment names one)."""
        env = {LAUNCHER_PID: str(launcher_pid),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "PYTHONUNBUFFERED": "1", LINE_PREFIX: "[rank${rank}]:"}
        interface = interface_toward(self.master)
        if interface is not None:
            env |= {name: interface for name in SOCKET_IFNAMES
                    if self.nnodes == 1 or name not in os.environ}
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


def end_process_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes],
                      grace_s: float = GRACE_S) -> None:
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

