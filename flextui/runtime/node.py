"""The node program: ``python -m flextui.runtime.node``, which a launch over several
hosts (``flextui launch --hosts``) starts on every host through ssh.

The launcher writes one request to the program's stdin, a 4-byte big-endian length and
then a versioned msgpack document (``NODE_REQUEST``); no shared filesystem is assumed:

- ``{"action": "preflight", "port"?}``: the program answers with this host's facts
  (its name, the flextui, torch and Python versions, GPUs, CPU cores, whether the port
  asked for is free, else a free one) and ends.
- ``{"action": "run", "plan": ..., "nnodes", "node_rank", "ranks", "master", "port",
  "run_id"}``: the program writes the plan to a temporary directory, runs this node's
  torchrun with its output going straight to stdout (to the launcher, through ssh),
  and ends with torchrun's exit code.

The program's own words are single lines tagged ``@flextui-node`` (JSON). stdin stays
open while the run goes on: when it closes (the launcher stopped the run or quit, the
connection dropped) the program ends its torchrun and so its ranks, which watch it
(``FLEXTUI_LAUNCHER_PID``); SIGTERM, SIGHUP and SIGINT do the same. No rank outlives
its node program.
"""

from __future__ import annotations

import contextlib
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
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from flextui import __version__
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.fields import FieldReader
from flextui.machine.detect import usable_cpus
from flextui.runtime.launch import Torchrun, end_process_group, free_port, port_is_free

NODE_REQUEST = DocumentFormat("flextui-node", 1, "node request")
NODE_TAG = "@flextui-node "
_LENGTH = struct.Struct(">I")
MAX_REQUEST = 1 << 30


class Action(StrEnum):
    """What a request asks the node program to do."""

    PREFLIGHT = "preflight"
    RUN = "run"


def frame(request: dict[str, Any]) -> bytes:
    """A request as the node program reads it from stdin."""
    data = NODE_REQUEST.encode(request)
    return _LENGTH.pack(len(data)) + data


def node_line(**fields: Any) -> str:
    return NODE_TAG + json.dumps(fields)


def parse_node_line(line: str) -> dict[str, Any] | None:
    """The fields of one of the program's own lines, None for any other line."""
    if not line.startswith(NODE_TAG):
        return None
    try:
        fields = json.loads(line[len(NODE_TAG):])
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def facts(port: int | None = None) -> dict[str, Any]:
    """What preflight reports of this host: ``port`` is the rendezvous port asked for
    (is it free here?), else a free one."""
    import torch

    return {"host": socket.gethostname(), "flextui": __version__, "torch": torch.__version__,
            "python": platform.python_version(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "cpus": usable_cpus(), "port": port or free_port(),
            "port_free": port is None or port_is_free(port)}


def main() -> int:
    try:
        request = read_request(sys.stdin.buffer)
    except FlextuiError as exc:
        print(f"flextui node program: {exc}", file=sys.stderr)
        return 2
    if request["action"] == Action.PREFLIGHT:
        _say(facts=facts(request.get("port")))
        return 0
    return _run(request)


def read_request(stream: IO[bytes]) -> dict[str, Any]:
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
    f = FieldReader("request")
    action = f.choice(f.required(body, "action", "request", "preflight"), "action",
                      (Action.PREFLIGHT, Action.RUN))
    if action == Action.PREFLIGHT and body.get("port") is not None:
        f.integer(body["port"], "port", 1, 65535)
    if action == Action.RUN:
        f.exact_keys(body, ("action", "plan", "nnodes", "node_rank", "ranks", "master",
                            "port", "run_id"), "request")
        if not isinstance(body["plan"], bytes):
            f.fail("plan", "must be bytes")
        for name, least in (("nnodes", 1), ("node_rank", 0), ("ranks", 1), ("port", 1)):
            f.integer(body[name], name, least)
        f.string(body["master"], "master")
        f.string(body["run_id"], "run_id")
    return body


def torchrun_for(request: dict[str, Any], directory: Path) -> Torchrun:
    """The torchrun a run request asks for, its plan file in ``directory``."""
    return Torchrun(directory / "plan.msgpack", request["ranks"], request["port"],
                    request["run_id"], directory / "ranks", request["master"],
                    request["nnodes"], request["node_rank"])


def _run(request: dict[str, Any]) -> int:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=_watch_stdin, args=(sys.stdin.fileno(), stop),
                     name="flextui-node-stdin", daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="flextui-node-") as tmp:
        torchrun = torchrun_for(request, Path(tmp))
        torchrun.plan.write_bytes(request["plan"])
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


def _say(**fields: Any) -> None:
    sys.stdout.write(node_line(**fields) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
