"""A launch over several hosts, through ssh: the preflight that checks every host before
any rank starts, and the run that starts the node program (``runtime.node``) on every
host and follows them all to the end.

Each host is reached with ``ssh -o BatchMode=yes HOST python -m flextui.runtime.node``
(the ssh command is ``--ssh``, else ``FLEXTUI_SSH``, else ``ssh``; the Python is the
launcher's own path unless ``--remote-python`` says another). The launch plan travels
over the session's stdin. Ending a run closes every session's stdin, which ends the
node programs' torchruns and ranks; an ssh that is still there after a grace period is
killed. A node that ends badly (its ranks failed, its node program or connection was
lost) ends the launch: the other nodes are stopped, and the outcome names the rank that
failed first and its host.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from flextui import __version__
from flextui.errors import FlextuiError
from flextui.runtime.hosts import Host
from flextui.runtime.launch import (
    GRACE_S,
    TAIL_LINES,
    Outcome,
    RankOutput,
    RunStatus,
    Torchrun,
    end_process_group,
)
from flextui.runtime.metrics import RankRecord
from flextui.runtime.node import Action, frame, parse_node_line, torchrun_for
from flextui.runtime.spec import Backend

SSH_ENV = "FLEXTUI_SSH"
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
PREFLIGHT_S = 60.0


@dataclass(frozen=True)
class Remote:
    """How hosts are reached: the ssh command and the Python that runs flextui there."""

    ssh: tuple[str, ...] = ("ssh",)
    python: str = sys.executable

    @classmethod
    def choose(cls, ssh: str | None = None, python: str | None = None) -> Remote:
        """``--ssh`` (else ``FLEXTUI_SSH``, else ssh) and ``--remote-python``."""
        text = ssh or os.environ.get(SSH_ENV) or "ssh"
        where = "--ssh" if ssh else SSH_ENV if os.environ.get(SSH_ENV) else "ssh"
        try:
            words = tuple(shlex.split(text))
        except ValueError as exc:
            raise FlextuiError(f"{where} {text!r}: {exc}") from None
        if not words:
            raise FlextuiError(f"{where} is empty: give an ssh command, e.g. --ssh 'ssh -p 2222'")
        return cls(words, python or sys.executable)

    def command(self, host: Host) -> list[str]:
        return [*self.ssh, *SSH_OPTIONS, host.name,
                shlex.join([self.python, "-m", "flextui.runtime.node"])]


@dataclass(frozen=True)
class Nodes:
    """A launch's hosts after preflight: the ranks each runs (host *k* runs node *k* of
    the cluster), how to reach them, and the rendezvous port on the first."""

    hosts: tuple[Host, ...]
    ranks: tuple[int, ...]
    remote: Remote
    port: int

    def torchrun(self, k: int, plan_dir: Path, run_id: str) -> Torchrun:
        """Node *k*'s torchrun, its plan in ``plan_dir``."""
        return torchrun_for(self.request(k, b"", run_id), plan_dir)

    def request(self, k: int, plan: bytes, run_id: str) -> dict[str, Any]:
        return {"action": str(Action.RUN), "plan": plan, "nnodes": len(self.hosts),
                "node_rank": k, "ranks": self.ranks[k], "master": self.hosts[0].address,
                "port": self.port, "run_id": run_id}

    def host_of(self, rank: int) -> str:
        first = 0
        for host, count in zip(self.hosts, self.ranks):
            if rank < first + count:
                return host.name
            first += count
        return "?"


# -- preflight --------------------------------------------------------------------------


def preflight(hosts: list[Host], ranks: list[int], backend: Backend, remote: Remote,
              port: int | None = None, timeout_s: float = PREFLIGHT_S) -> Nodes:
    """Ask every host, at once, for its facts, and check them: reachable without a
    password, the same flextui and torch as here, enough devices for its ranks.
    FlextuiError naming the first host (in order) that is not ready; nothing starts."""
    import torch

    request = frame({"action": str(Action.PREFLIGHT), "port": port})
    procs = [_start(remote.command(host)) for host in hosts]
    with ThreadPoolExecutor(max_workers=min(len(procs), 64)) as pool:
        answers = list(pool.map(lambda proc: _answer(proc, request, timeout_s), procs))
    local = {"flextui": __version__, "torch": torch.__version__}
    found: list[dict[str, Any]] = []
    for host, count, (facts, problem) in zip(hosts, ranks, answers):
        if facts is None:
            raise FlextuiError(f"host {host.name}: {problem}")
        found.append(facts)
        theirs = {k: facts.get(k) for k in local}
        if theirs != local:
            raise FlextuiError(
                f"host {host.name} has flextui {theirs['flextui']} and torch {theirs['torch']}"
                f", this machine flextui {local['flextui']} and torch {local['torch']}: "
                "install the same versions on every host")
        devices, what = ((facts.get("gpus"), "GPUs") if backend == Backend.NCCL
                         else (facts.get("cpus"), "CPU cores"))
        if not isinstance(devices, int) or devices < count:
            raise FlextuiError(f"host {host.name} has {devices} {what}; the launch puts "
                               f"{count} ranks there (one {what[:-1]} each)")
    if found[0].get("port_free") is not True:
        raise FlextuiError(f"port {port} is in use on host {hosts[0].name}; leave --port out "
                           "to use a free one")
    port = found[0].get("port")
    if not isinstance(port, int):
        raise FlextuiError(f"host {hosts[0].name}: preflight found no free port; give --port")
    return Nodes(tuple(hosts), tuple(ranks), remote, port)


def _start(command: list[str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise FlextuiError(f"cannot run {command[0]}: {exc.strerror or exc}; give the ssh "
                           f"command with --ssh or {SSH_ENV}") from None


def _answer(proc: subprocess.Popen[bytes], request: bytes, timeout_s: float
            ) -> tuple[dict[str, Any] | None, str]:
    """A host's facts, or why there are none."""
    try:
        out, err = proc.communicate(request, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_process_group(proc, grace_s=1.0)
        return None, f"no answer in {timeout_s:.0f} s (is the host up?)"
    said = out.decode(errors="replace").splitlines()
    for line in said:
        fields = parse_node_line(line)
        if fields is not None and isinstance(fields.get("facts"), dict):
            return fields["facts"], ""
    words = [line.strip() for line in err.decode(errors="replace").splitlines() + said
             if line.strip()]
    last = words[-1] if words else f"exit status {proc.returncode}, nothing said"
    if proc.returncode == 255:  # ssh's own failure
        if "Permission denied" in last or "password" in last.lower():
            return None, (f"ssh cannot log in without a password (BatchMode): {last.rstrip('.')}; "
                          "set up "
                          "key-based login (ssh-copy-id) or give --ssh")
        return None, f"cannot reach it over ssh: {last}"
    return None, (f"the node program did not answer: {last} (is flextui installed there for "
                  "this Python? --remote-python names another)")


# -- the run ----------------------------------------------------------------------------


@dataclass
class _Node:
    host: Host
    proc: subprocess.Popen[bytes]
    pid: int | None = None
    torchrun_pid: int | None = None
    exit: int | None = None        # torchrun's exit code, as the node program said
    ended_at: float | None = None  # when its ssh session ended
    lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))


class NodesRun:
    """A launch over several hosts in progress."""

    def __init__(self, nodes: Nodes, plan: bytes, on_record: Callable[[RankRecord], None],
                 on_output: Callable[[int, str], None]) -> None:
        self.nodes, self.plan = nodes, plan
        self.run_id = uuid.uuid4().hex[:12]
        self.output = RankOutput(on_record, on_output, nodes.host_of)
        self._nodes: list[_Node] = []
        self._readers: list[threading.Thread] = []
        self._started = 0.0
        self._stopped = False
        self._closing = False
        self._lock = threading.Lock()

    @property
    def worker_pids(self) -> dict[int, int]:
        return self.output.worker_pids

    def pids(self) -> dict[str, list[int]]:
        """Every process of the run known here: ssh sessions, node programs, torchruns."""
        return {"ssh": [n.proc.pid for n in self._nodes],
                "node": [n.pid for n in self._nodes if n.pid],
                "torchrun": [n.torchrun_pid for n in self._nodes if n.torchrun_pid]}

    def start(self) -> None:
        self._started = time.monotonic()
        for k, host in enumerate(self.nodes.hosts):
            command = self.nodes.remote.command(host)
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            node = _Node(host, proc)
            self._nodes.append(node)
            assert proc.stdin is not None and proc.stdout is not None
            request = frame(self.nodes.request(k, self.plan, self.run_id))
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(request)  # stdin stays open: closing it ends the node
                proc.stdin.flush()
            stdout = io.TextIOWrapper(proc.stdout, errors="replace")
            reader = threading.Thread(target=self._read, args=(node, stdout),
                                      name=f"flextui-node-{k}", daemon=True)
            reader.start()
            self._readers.append(reader)

    def wait(self, stop: threading.Event | None = None) -> Outcome:
        """Follow every node to its end; a node that ends badly, or ``stop``, ends all."""
        while any(n.proc.poll() is None for n in self._nodes):
            asked = stop is not None and stop.is_set()
            if (asked or self._failed_node() is not None) and not self._closing:
                self.stop(asked=asked)
            time.sleep(0.05)
        for reader in self._readers:
            reader.join(timeout=5)
        return self._outcome()

    def stop(self, asked: bool = True) -> None:
        """End every node: close its session's stdin (its node program ends its torchrun
        and ranks), then kill an ssh that is still there after GRACE_S."""
        self._stopped = self._stopped or asked
        self._closing = True
        for node in self._nodes:
            if node.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    node.proc.stdin.close()
        deadline = time.monotonic() + GRACE_S * 2
        for node in self._nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            end_process_group(node.proc, grace_s=1.0)

    def _read(self, node: _Node, stream: IO[str]) -> None:
        for raw in stream:
            line = raw.rstrip("\n")
            said = parse_node_line(line)
            if said is None:
                if not line.startswith("[rank"):  # torchrun's or ssh's own words
                    node.lines.append(line)
                self.output.feed(line, node.host.name)
                continue
            with self._lock:
                if said.get("started"):
                    node.pid, node.torchrun_pid = said.get("pid"), said.get("torchrun_pid")
                elif said.get("ended"):
                    node.exit = said.get("exit")
        node.proc.wait()
        with self._lock:
            node.ended_at = time.monotonic()

    def _failed_node(self) -> _Node | None:
        """The node that ended badly first (its torchrun failed, or it was lost)."""
        with self._lock:
            bad = [n for n in self._nodes if n.ended_at is not None
                   and (n.exit != 0 or n.proc.returncode != 0)]
        return min(bad, key=lambda n: n.ended_at or 0.0, default=None)

    def _outcome(self) -> Outcome:
        elapsed = time.monotonic() - self._started
        if self._stopped:
            return Outcome(RunStatus.STOPPED, 0, None, "stopped; every rank on every host ended",
                           elapsed)
        node = self._failed_node()
        if node is None:
            return Outcome(RunStatus.FINISHED, 0, None,
                           f"finished in {elapsed:.1f} s on {len(self._nodes)} hosts", elapsed)
        code = node.exit if node.exit is not None else node.proc.returncode
        if node.exit is not None:  # its torchrun ended: a rank failed, here or elsewhere
            rank, message = self.output.failure(code)
            return Outcome(RunStatus.FAILED, code, rank, message, elapsed)
        last = node.lines[-1].strip() if node.lines else "nothing said"
        return Outcome(RunStatus.FAILED, code, None,
                       f"lost host {node.host.name}: its node program or ssh session ended "
                       f"(exit status {node.proc.returncode}): {last}", elapsed)
