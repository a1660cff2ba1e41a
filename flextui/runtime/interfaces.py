"""The network interface a node's ranks listen on: the one that holds this host's
address toward the address the nodes meet at (the first host's, or the loopback on one
node). Named to gloo and NCCL (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``), their
sockets listen on that address; without it gloo listens on what the host's own name
resolves to, which on many hosts (and in ``/etc/hosts`` as Debian writes it) is a
loopback address the other hosts cannot reach.

IPv4 only: an interface is found by its first IPv4 address (``SIOCGIFADDR``), the one
gloo binds when given the interface. Linux.
"""

from __future__ import annotations

import fcntl
import socket
import struct

#: the ioctl that reads an interface's (first) IPv4 address, from <linux/sockios.h>
SIOCGIFADDR = 0x8915
#: environment variables that name the interface gloo's and NCCL's sockets use
SOCKET_IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def source_address(destination: str) -> str | None:
    """This host's IPv4 address that packets to ``destination`` leave from (a UDP
    socket connected: nothing is sent); None with no route to it, or for a name that
    does not resolve to an IPv4 address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((destination, 9))
        except (OSError, UnicodeError):
            return None
        return str(probe.getsockname()[0])


def interface_holding(address: str) -> str | None:
    """The name of the interface whose first IPv4 address is ``address``, if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if _ipv4_address(name) == address), None)


def interface_toward(destination: str) -> str | None:
    """The interface holding this host's address toward ``destination``: the loopback
    for 127.0.0.1, the cluster network's for the first host of a launch over hosts."""
    address = source_address(destination)
    return None if address is None else interface_holding(address)


def _ipv4_address(name: str) -> str | None:
    request = struct.pack("256s", name.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])  # ifr_name[16], then sockaddr_in's family, port
