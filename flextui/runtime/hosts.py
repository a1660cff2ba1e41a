"""The hosts a launch runs on: ``--hosts h1,h2`` or a hostfile, one host a line with
an optional ``slots=N`` (ranks on that host), as DeepSpeed reads it::

    # comments and blank lines are skipped
    gpu-node-1 slots=8
    gpu-node-2 slots=8

One parser for both, shared by the command line and the app. A host name is what ssh
connects to and what the other hosts reach the first one by (the rendezvous).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flextui.errors import FlextuiError
from flextui.limits import FILE_BYTES, read_file
from flextui.machine import Cluster

#: what a host name may hold: a DNS name, an IPv4 address, or user@host; never an ssh
#: option (a leading "-")
_HOST = re.compile(r"^(?:[A-Za-z0-9_.+-]+@)?[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
_SLOTS = re.compile(r"^slots=(\d{1,6})$")
MAX_HOSTS = 4096


@dataclass(frozen=True)
class Host:
    """One host of a launch: its name and how many ranks it runs (None: as the
    cluster's node has devices)."""

    name: str
    slots: int | None = None

    @property
    def address(self) -> str:
        """The address the other hosts reach this one at (without any user@)."""
        return self.name.rpartition("@")[2]


def parse_host_list(text: str) -> list[Host]:
    """``--hosts h1,h2``: host names separated by commas."""
    names = [n.strip() for n in text.split(",")]
    hosts = [_host(name, "--hosts") for name in names if name]
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
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"hostfile {where} line {number}"
        name, *rest = line.split()
        slots = None
        if len(rest) > 1 or (rest and not _SLOTS.match(rest[0])):
            raise FlextuiError(f"{at}: {raw.strip()!r} is not 'HOST' or 'HOST slots=N'")
        if rest:
            slots = int(_SLOTS.match(rest[0])[1])  # type: ignore[index]
            if slots < 1:
                raise FlextuiError(f"{at}: slots must be at least 1")
        hosts.append(Host(_host(name, at).name, slots))
        if len(hosts) > MAX_HOSTS:
            raise FlextuiError(f"hostfile {where} lists more than {MAX_HOSTS} hosts")
    if not hosts:
        raise FlextuiError(f"hostfile {where} lists no host: write one host a line, "
                           "'HOST slots=N'")
    return _distinct(hosts, f"hostfile {where}")


def place(hosts: list[Host], cluster: Cluster) -> list[int]:
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


def _host(name: str, where: str) -> Host:
    if not _HOST.match(name):
        raise FlextuiError(f"{where}: {name!r} is not a host name")
    return Host(name)


def _distinct(hosts: list[Host], where: str) -> list[Host]:
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise FlextuiError(f"{where}: host {host.name} is listed twice")
        seen.add(host.name)
    return hosts
