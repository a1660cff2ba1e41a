"""Where a launch runs: the address the ranks of one node meet at, and the interface
their own sockets use."""

from __future__ import annotations

import socket

#: where the ranks of one node meet: the rendezvous store listens here only
LOOPBACK = "127.0.0.1"


def loopback_interface() -> str | None:
    """The name of this machine's loopback interface ("lo" on Linux), if it has one."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name.startswith("lo")), None)
