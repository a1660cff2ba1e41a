"""The node program: ``python -m flextui.runtime.node``, which a launch over several
hosts (``flextui launch --hosts``) starts on every host through ssh.

The launcher writes one request to the program's stdin, a 4-byte big-endian length and
then a versioned msgpack document (``NODE_REQUEST``); no shared filesystem is assumed:

- ``PreflightRequest`` (``{"action": "preflight", "first", "port", "modules"}``): the
  program answers with this host's facts (``HostFacts``: its name, the flextui, torch
  and Python versions, GPUs, CPU cores, whether the port asked for is free, else a free
  one, what the first host's address resolves to here, and which of ``modules``, what
  the ranks import the model from, cannot be imported here) and ends.
- ``RunRequest`` (``{"action": "run", "plan", "nnodes", "node_rank", "ranks",
  "master", "port", "run_id"}``): the program writes the plan to a temporary
  directory, runs this node's torchrun with its output going straight to stdout (to
  the launcher, through ssh), and ends with torchrun's exit code.

Each request is decoded once, every field checked, into its class.

The program's own words are single lines tagged ``@flextui-node`` (JSON). stdin stays
open while the run goes on: when it closes (the launcher stopped the run or quit, the
connection dropped) the program ends its torchrun and so its ranks, which watch it
(``FLEXTUI_LAUNCHER_PID``); SIGTERM, SIGHUP and SIGINT do the same. No rank outlives
its node program.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import platform
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from flextui import __version__
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.fields import FieldReader, describe
from flextui.graph.model_source import MODULE
from flextui.limits import HOSTS, RANKS_PER_HOST
from flextui.machine.detect import usable_cpus
from flextui.runtime.launch import Torchrun, end_process_group, free_port, port_is_free
from flextui.runtime.spec import LaunchSpec

NODE_REQUEST = DocumentFormat("flextui-node", 2, "node request")
NODE_TAG = "@flextui-node "
_LENGTH = struct.Struct(">I")
MAX_REQUEST = 1 << 30


class Action(StrEnum):
    """What a request asks the node program to do."""

    PREFLIGHT = "preflight"
    RUN = "run"


@dataclass(frozen=True)
class PreflightRequest:
    """Ask a host for its facts: ``first`` is the first host's address as the launch
    names it (this host says what it resolves to), ``port`` the rendezvous port asked
    for (is it free here?), None for a free one; ``modules`` what the ranks import the
    model from (a factory's module, torchvision): are they importable here?"""

    first: str
    port: int | None = None
    modules: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"action": str(Action.PREFLIGHT), "first": self.first, "port": self.port,
                "modules": list(self.modules)}


@dataclass(frozen=True)
class RunRequest:
    """Run node ``node_rank`` of ``nnodes``: ``ranks`` processes of the launch ``plan``,
    meeting the other nodes at ``master``:``port`` under ``run_id``."""

    plan: bytes
    nnodes: int
    node_rank: int
    ranks: int
    master: str
    port: int
    run_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"action": str(Action.RUN), "plan": self.plan, "nnodes": self.nnodes,
                "node_rank": self.node_rank, "ranks": self.ranks, "master": self.master,
                "port": self.port, "run_id": self.run_id}

    def torchrun(self, directory: Path) -> Torchrun:
        """The torchrun this request asks for, its plan file in ``directory``."""
        return Torchrun(directory / "plan.msgpack", self.ranks, self.port, self.run_id,
                        directory / "ranks", self.master, self.nnodes, self.node_rank)


Request = PreflightRequest | RunRequest


@dataclass(frozen=True)
class HostFacts:
    """What preflight finds on a host: its name, the flextui, torch and Python there,
    its GPUs and usable CPU cores, the rendezvous ``port`` (the one asked for, else a
    free one) and whether it is free, and the addresses the first host's name resolves
    to there (``first_addresses``; none when it does not resolve), and the modules asked
    about that cannot be imported there (``missing``)."""

    host: str
    flextui: str
    torch: str
    python: str
    gpus: int
    cpus: int
    port: int
    port_free: bool
    first_addresses: tuple[str, ...]
    missing: tuple[str, ...] = ()

    @classmethod
    def here(cls, request: PreflightRequest) -> HostFacts:
        import torch

        port = request.port
        return cls(socket.gethostname(), __version__, torch.__version__,
                   platform.python_version(),
                   torch.cuda.device_count() if torch.cuda.is_available() else 0,
                   usable_cpus(), port or free_port(), port is None or port_is_free(port),
                   resolve(request.first),
                   tuple(m for m in request.modules if not _importable(m)))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "first_addresses": list(self.first_addresses),
                "missing": list(self.missing)}

    @classmethod
    def decode(cls, data: object, where: str, versions: dict[str, str]) -> HostFacts:
        """The facts a host said; FlextuiError naming ``where`` when they are not facts,
        or when its flextui and torch are not ``versions`` (this machine's), checked
        first: another flextui may say other facts."""
        f = FieldReader(where)
        data = f.mapping(data, "facts")
        theirs = {name: data.get(name) for name in versions}
        if theirs != versions:
            raise FlextuiError(
                f"{where} has flextui {str(theirs['flextui'])[:40]} and torch "
                f"{str(theirs['torch'])[:40]}, this machine flextui {versions['flextui']} and "
                f"torch {versions['torch']}: install the same versions on every host")
        f.exact_keys(data, [field.name for field in fields(cls)], "facts")
        return cls(f.string(data["host"], "host", empty=True),
                   f.string(data["flextui"], "flextui"), f.string(data["torch"], "torch"),
                   f.string(data["python"], "python"), f.integer(data["gpus"], "gpus", 0),
                   f.integer(data["cpus"], "cpus", 0), f.port(data["port"], "port"),
                   f.boolean(data["port_free"], "port_free"),
                   tuple(f.string(a, "first_addresses") for a in
                         f.items(data["first_addresses"], "first_addresses")),
                   tuple(f.string(m, "missing") for m in f.items(data["missing"], "missing")))


def _importable(module: str) -> bool:
    """A module this Python finds (its parent packages are imported to look)."""
    try:
        return importlib.util.find_spec(module) is not None
    except Exception:  # noqa: BLE001 (a parent package may raise anything on import)
        return False


def resolve(name: str) -> tuple[str, ...]:
    """The addresses ``name`` resolves to here, in the resolver's order; none when it
    does not resolve."""
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(str(where[0]) for *_, where in found))


def frame(request: Request) -> bytes:
    """A request as the node program reads it from stdin."""
    data = NODE_REQUEST.encode(request.to_dict())
    return _LENGTH.pack(len(data)) + data


def node_line(**said: Any) -> str:
    return NODE_TAG + json.dumps(said)


def parse_node_line(line: str) -> dict[str, Any] | None:
    """The fields of one of the program's own lines, None for any other line."""
    if not line.startswith(NODE_TAG):
        return None
    try:
        said = json.loads(line[len(NODE_TAG):])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def main() -> int:
    try:
        request = read_request(sys.stdin.buffer)
    except FlextuiError as exc:
        print(f"flextui node program: {exc}", file=sys.stderr)
        return 2
    if isinstance(request, PreflightRequest):
        _say(facts=HostFacts.here(request).to_dict())
        return 0
    return _run(request)


def read_request(stream: IO[bytes]) -> Request:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise FlextuiError("no request on stdin (the launcher sends one; start this "
                           "program with flextui launch --hosts)")
    (length,) = _LENGTH.unpack(head)
    if length > MAX_REQUEST:
        raise FlextuiError(f"a request of {length:,} bytes is over {MAX_REQUEST:,}")
    data = stream.read(length)
    if len(data) < length:
        raise FlextuiError(f"the request ended after {len(data):,} of {length:,} bytes")
    try:
        _, body = NODE_REQUEST.decode(data)
    except BadDocument as bad:
        raise FlextuiError(f"request: {bad.problem}") from None
    return decode_request(body)


def decode_request(body: dict[Any, Any]) -> Request:
    """The request a document's body holds, every field checked."""
    f = FieldReader("request")
    action = f.choice(f.required(body, "action", "", "preflight"), "action", tuple(Action))
    if action == Action.PREFLIGHT:
        f.exact_keys(body, ("action", "first", "port", "modules"), "")
        port = body["port"]
        modules = tuple(f.string(m, "modules") for m in f.items(body["modules"], "modules"))
        for module in modules:
            if not MODULE.fullmatch(module):
                f.fail("modules", f"{module!r:.80} is not a module name")
        return PreflightRequest(f.string(body["first"], "first"),
                                None if port is None else f.port(port, "port"), modules)
    f.exact_keys(body, ("action", "plan", "nnodes", "node_rank", "ranks", "master", "port",
                        "run_id"), "")
    if not isinstance(body["plan"], bytes):
        f.fail("plan", f"expected bytes, found {describe(body['plan'])}")
    # the plan is checked here, where it arrives, not by every rank after torchrun started
    # them: a damaged one is this program's one error, not a traceback from each rank
    spec = LaunchSpec.decode(body["plan"], "request: plan")
    nnodes = f.integer(body["nnodes"], "nnodes", 1, min(HOSTS.value, spec.num_ranks))
    ranks = f.integer(body["ranks"], "ranks", 1, min(RANKS_PER_HOST.value, spec.num_ranks))
    if nnodes == 1 and ranks != spec.num_ranks:
        f.fail("ranks", f"{ranks} ranks on the only node of a plan for {spec.num_ranks}")
    return RunRequest(body["plan"], nnodes,
                      f.integer(body["node_rank"], "node_rank", 0, nnodes - 1), ranks,
                      f.string(body["master"], "master"), f.port(body["port"], "port"),
                      f.string(body["run_id"], "run_id"))


def _run(request: RunRequest) -> int:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=_watch_stdin, args=(sys.stdin.fileno(), stop),
                     name="flextui-node-stdin", daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="flextui-node-") as tmp:
        torchrun = request.torchrun(Path(tmp))
        torchrun.plan.write_bytes(request.plan)
        sys.stdout.flush()
        proc = subprocess.Popen(torchrun.command(), stdin=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **torchrun.environment(os.getpid())})
        _say(started=True, pid=os.getpid(), torchrun_pid=proc.pid)
        while proc.poll() is None:
            if stop.wait(0.1):
                end_process_group(proc)
        _say(ended=True, exit=proc.returncode, stopped=stop.is_set())
        return 0 if proc.returncode == 0 else 1


def _watch_stdin(fd: int, stop: threading.Event) -> None:
    """Set ``stop`` when stdin closes (the launcher's end of the ssh session). It reads
    the descriptor, not ``sys.stdin``: a thread blocked in a buffered reader would hold
    its lock while the interpreter shuts down."""
    with contextlib.suppress(OSError):
        while os.read(fd, 4096):
            pass
    stop.set()


def _say(**said: Any) -> None:
    sys.stdout.write(node_line(**said) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
