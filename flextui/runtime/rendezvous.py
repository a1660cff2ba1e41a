"""torchrun whose rendezvous store listens on one address, not on every interface:
``python -m flextui.runtime.rendezvous TORCHRUN-ARGUMENTS`` registers the rendezvous
backend ``flextui`` and runs torchrun's own ``main`` with the arguments.

torchrun's stores bind every interface: the ``c10d`` backend's TCPStore and the one it
shares with the ranks, and the ``static`` backend's, listen on ``*:PORT`` (``ss
-ltn``) whatever address the endpoint names, with no authentication, for the whole run.
The ``flextui`` backend is torchrun's static rendezvous (node *k* is ``--rdzv-conf
rank=k`` of ``--nnodes``; every node meets at ``--rdzv-endpoint ADDRESS:PORT``) whose
store on node 0 is served from a socket bound to ADDRESS alone (TCPStore's
``master_listen_fd``): 127.0.0.1 for a launch on this machine, the first host's address
for a launch over hosts. The ranks reach the same store as clients (torchrun hands them
the agent's store: ``TORCHELASTIC_USE_AGENT_STORE``), so it is the run's only
rendezvous listener; it closes when torchrun ends.
"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters

BACKEND = "flextui"
TIMEOUT_S = 600  # as torchrun's static rendezvous waits for every node


def listen(address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address``:``port`` only; OSError saying so when this
    host cannot listen there (the address is not one of its own, the port is taken)."""
    try:
        family, kind, proto, _, where = socket.getaddrinfo(address, port,
                                                           type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise OSError(f"cannot listen on {address}:{port}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {address}:{port} on this host, where the nodes "
                      f"meet: {exc.strerror or exc}") from None
    return sock


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """The ``flextui`` rendezvous for torchrun's parameters (what torch's registry
    calls)."""
    from torch.distributed import PrefixStore, TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousInfo, RendezvousStoreInfo
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    class BoundRendezvous(StaticTCPRendezvous):
        """Static rendezvous whose store on node 0 listens on the endpoint's address."""

        def get_backend(self) -> str:
            return BACKEND

        def next_rendezvous(self) -> RendezvousInfo:
            if self._store is None:
                first = self.rank == 0
                fd = listen(self.master_addr, self.master_port).detach() if first else None
                self._store = TCPStore(self.master_addr, self.master_port, self.world_size,
                                       first, self.timeout, multi_tenant=True,
                                       master_listen_fd=fd)
            return RendezvousInfo(PrefixStore(self.run_id, self._store), self.rank,
                                  self.world_size,
                                  RendezvousStoreInfo(self.master_addr, self.master_port))

    address, port = parse_rendezvous_endpoint(params.endpoint, -1)
    return BoundRendezvous(address, port, int(params.config["rank"]), params.max_nodes,
                           params.run_id, int(params.config.get("timeout", TIMEOUT_S)))


def main(argv: list[str]) -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry
    from torch.distributed.run import main as torchrun

    rendezvous_handler_registry.register(BACKEND, create_handler)
    torchrun(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
