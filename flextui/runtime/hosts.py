"""The hosts a launch runs on: ``--hosts h1,h2`` or a hostfile, one host a line with
an optional ``slots=N`` (ranks on that host), as DeepSpeed reads it::

    # comments and blank lines are skipped
    gpu-node-1 slots=8
    gpu-node-2 slots=8

One parser for both, shared by the command line and the app. A host is
``[USER@]NAME[:PORT]`` (an IPv6 address bare, or in brackets with a port): what ssh
connects to (on PORT when given), and NAME is what the other hosts reach the first one
by (the rendezvous). A host never starts with ``-`` (ssh would read it as an option),
and one host is listed once: ``h1``, ``H1``, ``h1.``, ``me@h1`` and ``h1:22`` are the
same host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flextui.errors import FlextuiError
from flextui.limits import FILE_BYTES, HOSTS, RANKS_PER_HOST, read_file
from flextui.machine import Cluster

_USER = r"(?P<user>[A-Za-z0-9_][A-Za-z0-9_.+-]*)@"
_NAME = r"(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]*)(?::(?P<port>\d{1,5}))?"
_IPV6 = (r"\[(?P<bracketed>[0-9A-Fa-f:.]+)\](?::(?P<v6port>\d{1,5}))?"
         r"|(?P<bare>[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)")
_HOST = re.compile(rf"^(?:{_USER})?(?:{_NAME}|{_IPV6})$")
_SLOTS = re.compile(r"^slots=(\d{1,9})$")


@dataclass(frozen=True)
class Host:
    """One host of a launch: its name as given and how many ranks it runs (None: as
    the cluster's node has devices). FlextuiError for a name that is not a host's or
    slots out of range (``Host.parse`` says where the name came from)."""

    name: str
    slots: int | None = None

    def __post_init__(self) -> None:
        problem = _problem(self.name, self.slots)
        if problem is not None:
            raise FlextuiError(problem)

    @classmethod
    def parse(cls, text: str, where: str, slots: int | None = None) -> Host:
        problem = _problem(text, slots)
        if problem is not None:
            raise FlextuiError(f"{where}: {problem}")
        return cls(text, slots)

    @property
    def address(self) -> str:
        """The address the other hosts reach this one at (without user@ or :port)."""
        m = _parts(self.name)
        return m["name"] or m["bracketed"] or m["bare"]

    @property
    def key(self) -> str:
        """What tells hosts apart: the address without case or a trailing dot."""
        return self.address.lower().rstrip(".")

    @property
    def port(self) -> int | None:
        """The port ssh connects to, when the name gives one."""
        m = _parts(self.name)
        port = m["port"] or m["v6port"]
        return int(port) if port else None

    @property
    def destination(self) -> str:
        """What ssh connects to: ``[user@]address``, or an ``ssh://`` URI with the port."""
        m = _parts(self.name)
        user = f"{m['user']}@" if m["user"] else ""
        port = self.port
        if not port:
            return f"{user}{self.address}"
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"ssh://{user}{host}:{port}"


def _parts(name: str) -> re.Match[str]:
    match = _HOST.match(name)
    assert match is not None, "a Host's name is checked when it is made"
    return match


def _problem(name: str, slots: int | None) -> str | None:
    """What is wrong with a host ``name`` and its ``slots``, None when nothing is."""
    if name.startswith("-"):
        return (f"{name[:60]!r} starts with '-', which ssh would read as an option: give a "
                "host name")
    match = _HOST.match(name)
    port = match and (match["port"] or match["v6port"])
    if not match or (port and not 1 <= int(port) <= 65535):
        return f"{name[:60]!r} is not a host name: give NAME, USER@NAME or NAME:PORT"
    if slots is not None and not 1 <= slots <= RANKS_PER_HOST.value:
        return f"slots={slots:,}: give from 1 to {RANKS_PER_HOST.value:,} ranks on one host"
    return None


def parse_host_list(text: str) -> list[Host]:
    """``--hosts h1,h2``: host names separated by commas."""
    names = [n.strip() for n in text.split(",", HOSTS.value)]
    if len(names) > HOSTS.value:
        raise FlextuiError(f"--hosts lists more than {HOSTS.value:,} hosts, flextui's limit "
                           f"for one launch; {HOSTS.fix}")
    hosts = [Host.parse(name, "--hosts") for name in names if name]
    if not hosts:
        raise FlextuiError("--hosts is empty: give host names separated by commas, "
                           "e.g. --hosts node1,node2")
    return _distinct(hosts, "--hosts")


def read_hostfile(path: str | Path) -> list[Host]:
    """The hosts of a hostfile; FlextuiError naming the file and line of a bad one."""
    try:
        text = read_file(path, FILE_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise FlextuiError(f"cannot read hostfile {path}: {why}") from None
    return parse_hostfile(text, str(path))


def parse_hostfile(text: str, where: str) -> list[Host]:
    hosts: list[Host] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(hosts) == HOSTS.value:
            raise FlextuiError(f"hostfile {where} lists more than {HOSTS.value:,} hosts, "
                               f"flextui's limit for one launch; {HOSTS.fix}")
        at = f"hostfile {where} line {number}"
        name, *rest = line.split()
        slots = None
        if len(rest) > 1 or (rest and not _SLOTS.match(rest[0])):
            raise FlextuiError(f"{at}: {raw.strip()[:80]!r} is not 'HOST' or 'HOST slots=N'")
        if rest:
            slots = int(_SLOTS.match(rest[0])[1])  # type: ignore[index]
        hosts.append(Host.parse(name, at, slots))
    if not hosts:
        raise FlextuiError(f"hostfile {where} lists no host: write one host a line, "
                           "'HOST slots=N'")
    return _distinct(hosts, f"hostfile {where}")


def place(hosts: list[Host] | tuple[Host, ...], cluster: Cluster) -> list[int]:
    """The ranks each host runs: host *k* runs node *k* of ``cluster``, whose devices
    must be numbered node by node (device *i* is global rank *i*). FlextuiError when the
    hosts and the cluster's nodes do not match."""
    nodes = [d.node for d in cluster.devices]
    if nodes != sorted(nodes):
        raise FlextuiError(f"cluster {cluster.name!r} numbers its devices across nodes out "
                           "of order; a launch over hosts needs node 0's devices first, then "
                           "node 1's, and so on")
    per_node = [nodes.count(n) for n in sorted(set(nodes))]
    if len(per_node) != len(hosts):
        raise FlextuiError(f"{len(hosts)} hosts for cluster {cluster.name!r}, which has "
                           f"{len(per_node)} nodes: give one host per node")
    for host, count in zip(hosts, per_node):
        if host.slots is not None and host.slots != count:
            raise FlextuiError(f"host {host.name} has slots={host.slots}, but its node of "
                               f"cluster {cluster.name!r} has {count} devices")
    return per_node


def _distinct(hosts: list[Host], where: str) -> list[Host]:
    seen: dict[str, Host] = {}
    for host in hosts:
        if host.key in seen:
            same = "" if seen[host.key].name == host.name else f" (as {seen[host.key].name})"
            raise FlextuiError(f"{where}: host {host.name} is listed twice{same}")
        seen[host.key] = host
    return hosts
