"""A launch over several hosts, through ssh: the preflight that checks every host before
any rank starts, and the run that starts the node program (``runtime.node``) on every
host and follows them all to the end.

Each host is reached with ``ssh -o BatchMode=yes -- HOST python -m
flextui.runtime.node`` (the launch's ``target.Remote``). Preflight holds at most
PREFLIGHT_SESSIONS sessions open at once and ends every one it started, however it
ends. The launch plan travels over the session's stdin. Ending a run closes every
session's stdin, which ends the node programs' torchruns and ranks; an ssh that is
still there after a grace period is killed. A node that ends badly (its ranks failed,
its node program or connection was lost, it did not start its node program in
NODE_START_S) ends the launch: the other nodes are stopped, and the outcome names the
rank that failed first and its host, or the host.
"""

from __future__ import annotations

import collections
import contextlib
import io
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait as futures_wait
from dataclasses import dataclass, field
from typing import IO, Any

from flextui import __version__
from flextui.errors import FlextuiError
from flextui.runtime.hosts import Host
from flextui.runtime.launch import GRACE_S, Outcome, RunStatus, end_process_group
from flextui.runtime.metrics import RankRecord
from flextui.runtime.node import HostFacts, PreflightRequest, RunRequest, frame, parse_node_line
from flextui.runtime.rankoutput import TAIL_LINES, RankOutput
from flextui.runtime.spec import Training
from flextui.runtime.target import LOOPBACK, SSH_ENV, LaunchTarget, check_ranks_fit

#: seconds a host has to answer preflight, and to start its node program for the run
PREFLIGHT_S = 60.0
NODE_START_S = 60.0
#: ssh sessions preflight holds open at once
PREFLIGHT_SESSIONS = 32
#: what ssh says when BatchMode keeps it from asking whether to trust a host's key
HOST_KEY_FAILED = "Host key verification failed"


@dataclass(frozen=True)
class Nodes:
    """A launch's hosts after preflight: its target (the hosts, how to reach them, the
    rendezvous port and run id), the ranks each host runs (host *k* runs node *k* of the
    cluster) and the ``address`` every node's torchrun meets at, on the first host."""

    target: LaunchTarget
    ranks: tuple[int, ...]
    address: str

    @property
    def hosts(self) -> tuple[Host, ...]:
        return self.target.hosts

    def request(self, k: int, plan: bytes) -> RunRequest:
        """What node *k*'s node program is asked to run."""
        port = self.target.port
        assert port is not None, "preflight chose the port"
        return RunRequest(plan, len(self.hosts), k, self.ranks[k], self.address, port,
                          self.target.run_id)

    def host_of(self, rank: int) -> str:
        first = 0
        for host, count in zip(self.hosts, self.ranks):
            if rank < first + count:
                return host.name
            first += count
        return "?"


# -- preflight --------------------------------------------------------------------------


class PreflightStopped(FlextuiError):
    """Preflight was asked to stop; every ssh session it started has ended."""


def preflight(target: LaunchTarget, ranks: list[int], training: Training,
              timeout_s: float | None = None, stop: threading.Event | None = None,
              modules: tuple[str, ...] = ()) -> Nodes:
    """Ask every host of ``target`` for its facts, PREFLIGHT_SESSIONS at a time, and
    check them: reachable without a password, the same flextui and torch as here, enough
    devices for its ranks, the ``modules`` the ranks import a model from (a factory's,
    torchvision) importable, the first host's address known to the others, the
    rendezvous port free on the first host. FlextuiError naming the first host (in
    order) that is not ready; nothing starts. Every ssh session it starts has ended
    when it returns or raises, ``stop`` set (PreflightStopped) or interrupted; a host
    has ``timeout_s`` (default PREFLIGHT_S) to answer."""
    import torch

    hosts = target.hosts
    request = frame(PreflightRequest(hosts[0].address, target.port, modules))
    sessions = _Sessions(target, request, PREFLIGHT_S if timeout_s is None else timeout_s)
    answers = sessions.ask_all(stop)
    versions = {"flextui": __version__, "torch": torch.__version__}
    found: list[HostFacts] = []
    for host, count, (said, problem) in zip(hosts, ranks, answers):
        if said is None:
            raise FlextuiError(f"host {host.name}: {problem}")
        facts = HostFacts.decode(said, f"host {host.name}", versions)
        if facts.missing:
            raise FlextuiError(f"host {host.name} cannot import {', '.join(facts.missing)}, "
                               "which the model needs: install it there (a model file "
                               "travels with the launch; a module does not)")
        check_ranks_fit(f"host {host.name}", count, training, facts.gpus, facts.cpus)
        found.append(facts)
    if not found[0].port_free:
        raise FlextuiError(f"port {target.port} is in use on host {hosts[0].name}; leave "
                           "--port out to use a free one")
    return Nodes(target.with_port(found[0].port), tuple(ranks), _meeting_address(hosts, found))


def _meeting_address(hosts: tuple[Host, ...], found: list[HostFacts]) -> str:
    """Where the nodes meet: the first host's address as the other hosts resolve it
    (the first one all of them share); on one host, its loopback."""
    if len(hosts) == 1:
        return LOOPBACK
    first = hosts[0].address
    for host, facts in zip(hosts[1:], found[1:]):
        if not facts.first_addresses:
            raise FlextuiError(f"host {host.name} cannot resolve {first}, the first host, "
                               "where every node meets: give the first host by an address "
                               "the others reach it at")
    shared = [a for a in found[1].first_addresses
              if all(a in facts.first_addresses for facts in found[2:])]
    if not shared:
        seen = "; ".join(f"{h.name}: {', '.join(f.first_addresses)}"
                         for h, f in zip(hosts[1:], found[1:]))
        raise FlextuiError(f"the hosts resolve {first}, the first host, to different "
                           f"addresses ({seen}): give it by one address they share")
    return shared[0]


class _Sessions:
    """Preflight's ssh sessions: at most PREFLIGHT_SESSIONS open at once, each asked
    the same request; every session started is ended (answered, timed out, or ended by
    ``cancel``) before ``ask_all`` returns or raises."""

    def __init__(self, target: LaunchTarget, request: bytes, timeout_s: float) -> None:
        self.target, self.request, self.timeout_s = target, request, timeout_s
        self._live: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._cancelled = False

    def ask_all(self, stop: threading.Event | None) -> list[tuple[Any, str]]:
        """Each host's facts (as said) or why there are none, in the hosts' order."""
        hosts = self.target.hosts
        pool = ThreadPoolExecutor(max_workers=min(len(hosts), PREFLIGHT_SESSIONS),
                                  thread_name_prefix="flextui-preflight")
        try:
            futures = [pool.submit(self._ask, host) for host in hosts]
            while futures_wait(futures, timeout=0.1).not_done:
                if stop is not None and stop.is_set():
                    raise PreflightStopped("stopped during preflight; every ssh session it "
                                           "started has ended")
            return [future.result() for future in futures]
        finally:
            self._cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def _ask(self, host: Host) -> tuple[Any, str]:
        with self._lock:
            if self._cancelled:
                return None, "not asked"
            proc = _start(self.target, host)
            self._live.add(proc)
        try:
            return _answer(proc, host, self.request, self.timeout_s)
        finally:
            end_process_group(proc, grace_s=1.0)
            with self._lock:
                self._live.discard(proc)

    def _cancel(self) -> None:
        """Start no more sessions, and end every one still open."""
        with self._lock:
            self._cancelled = True
            live = list(self._live)
        for proc in live:
            end_process_group(proc, grace_s=1.0)


def _start(target: LaunchTarget, host: Host) -> subprocess.Popen[bytes]:
    assert target.remote is not None, "a target over hosts has a remote"
    command = target.remote.command(host)
    try:
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise FlextuiError(f"cannot run {command[0]}: {exc.strerror or exc}; give the ssh "
                           f"command with --ssh or {SSH_ENV}") from None


def _answer(proc: subprocess.Popen[bytes], host: Host, request: bytes, timeout_s: float
            ) -> tuple[Any, str]:
    """``host``'s facts as it said them, or why there are none."""
    try:
        out, err = proc.communicate(request, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        end_process_group(proc, grace_s=1.0)
        return None, f"no answer in {timeout_s:.0f} s (is the host up?)"
    said = out.decode(errors="replace").splitlines()
    for line in said:
        fields = parse_node_line(line)
        if fields is not None and "facts" in fields:
            return fields["facts"], ""
    words = [line.strip() for line in err.decode(errors="replace").splitlines() + said
             if line.strip()]
    last = words[-1] if words else f"exit status {proc.returncode}, nothing said"
    if proc.returncode == 255:  # ssh's own failure
        if any(HOST_KEY_FAILED in line for line in words):
            scan = shlex.join(["ssh-keyscan", *(["-p", str(host.port)] if host.port else []),
                               host.address])
            return None, (f"ssh does not trust its host key ({HOST_KEY_FAILED}: the key is "
                          "unknown here, or it changed): check that the key is the host's, "
                          f"then add it to the known_hosts file ssh reads, e.g. {scan} >> "
                          "~/.ssh/known_hosts")
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
    silent_at: float | None = None  # when it was found not to have started in time
    lines: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES))


class NodesRun:
    """A launch over several hosts in progress. A host whose node program has not said
    it started within NODE_START_S ends the launch."""

    def __init__(self, nodes: Nodes, plan: bytes, on_record: Callable[[RankRecord], None],
                 on_output: Callable[[int, str], None]) -> None:
        self.nodes, self.plan = nodes, plan
        self.start_s = NODE_START_S
        self.output = RankOutput(on_record, on_output, nodes.host_of)
        self._nodes: list[_Node] = []
        self._threads: list[threading.Thread] = []
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
        """Start every host's ssh session; each is sent its request and read on a
        thread of its own (a host that does not read its request holds no other)."""
        self._started = time.monotonic()
        remote = self.nodes.target.remote
        assert remote is not None, "a target over hosts has a remote"
        for k, host in enumerate(self.nodes.hosts):
            proc = subprocess.Popen(remote.command(host), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            node = _Node(host, proc)
            self._nodes.append(node)
            request = frame(self.nodes.request(k, self.plan))
            thread = threading.Thread(target=self._follow, args=(node, request),
                                      name=f"flextui-node-{k}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait(self, stop: threading.Event | None = None) -> Outcome:
        """Follow every node to its end; a node that ends badly or does not start in
        time, or ``stop``, ends all."""
        while any(n.proc.poll() is None for n in self._nodes):
            asked = stop is not None and stop.is_set()
            self._find_silent()
            if (asked or self._failed_node() is not None) and not self._closing:
                self.stop(asked=asked)
            time.sleep(0.05)
        for thread in self._threads:
            thread.join(timeout=5)
        if self.output.error is not None:
            raise self.output.error
        return self._outcome()

    def stop(self, asked: bool = True) -> None:
        """End every node: close its session's stdin (its node program ends its torchrun
        and ranks), then kill an ssh that is still there after GRACE_S."""
        self._stopped = self._stopped or asked
        self._closing = True
        if asked:
            self.output.stopping()
        for node in self._nodes:
            if node.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    node.proc.stdin.close()
        deadline = time.monotonic() + GRACE_S * 2
        for node in self._nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            end_process_group(node.proc, grace_s=1.0)

    def _follow(self, node: _Node, request: bytes) -> None:
        """Send the node its request (stdin stays open: closing it ends the node), then
        read what it says to its end."""
        assert node.proc.stdin is not None and node.proc.stdout is not None
        _send(node.proc.stdin, request)
        for raw in io.TextIOWrapper(node.proc.stdout, errors="replace"):
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

    def _find_silent(self) -> None:
        """Mark the nodes that have not said they started within ``start_s``."""
        now = time.monotonic()
        if now - self._started < self.start_s:
            return
        with self._lock:
            for node in self._nodes:
                if node.pid is None and node.ended_at is None and node.silent_at is None:
                    node.silent_at = now

    def _failed_node(self) -> _Node | None:
        """The node that went wrong first: its torchrun failed, it was lost, or it did
        not start in time."""
        with self._lock:
            bad = [(n.ended_at, n) for n in self._nodes if n.ended_at is not None
                   and (n.exit != 0 or n.proc.returncode != 0)]
            bad += [(n.silent_at, n) for n in self._nodes if n.silent_at is not None]
        return min(bad, key=lambda when_node: when_node[0], default=(None, None))[1]

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
        if node.silent_at is not None:
            return Outcome(RunStatus.FAILED, code, None,
                           f"host {node.host.name} did not start its node program in "
                           f"{self.start_s:.0f} s (is it overloaded, or its ssh session "
                           "stuck?); every node was stopped", elapsed)
        if node.exit is not None:  # its torchrun ended: a rank failed, here or elsewhere
            rank, message = self.output.failure(code)
            return Outcome(RunStatus.FAILED, code, rank, message, elapsed)
        last = node.lines[-1].strip() if node.lines else "nothing said"
        return Outcome(RunStatus.FAILED, code, None,
                       f"lost host {node.host.name}: its node program or ssh session ended "
                       f"(exit status {node.proc.returncode}): {last}", elapsed)


def _send(stream: IO[bytes], data: bytes) -> None:
    """All of ``data`` to a session's stdin, past its buffer (whose lock a write blocked
    on a host that does not read would hold): ``stop`` may close it meanwhile."""
    raw = getattr(stream, "raw", stream)
    view = memoryview(data)
    with contextlib.suppress(OSError, ValueError):
        while view:
            view = view[raw.write(view) or 0:]
