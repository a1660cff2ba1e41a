"""What a cluster file's layout builds: devices of the kinds the file defines, switches,
and directed links, gathered into a :class:`~flextui.machine.cluster.Cluster`."""

from __future__ import annotations

from flextui.errors import ClusterError
from flextui.machine.cluster import Cluster, Device, DeviceSpec, Link
from flextui.machine.fields import Fields

__all__ = ["Layout"]


class Layout:
    """The devices, switches and links laid out so far, for one cluster file."""

    def __init__(self, fields: Fields, specs: dict[str, DeviceSpec]) -> None:
        self.fields = fields
        self.specs = specs
        self.devices: list[Device] = []
        self.switches: list[str] = []
        self.links: list[Link] = []
        self._pairs: set[tuple[str, str]] = set()

    def spec(self, value: object, field: str) -> DeviceSpec:
        """The device kind that ``value`` names, a key of [device_kinds]."""
        kind = self.fields.string(value, field)
        if kind not in self.specs:
            known = ", ".join(self.specs) or "none"
            self.fields.fail(field, f"unknown device kind {kind!r} (defined: {known}); add a "
                                    f"[device_kinds.{kind}] table or use a defined kind")
        return self.specs[kind]

    def add_device(self, name: str, node: int, spec: DeviceSpec) -> None:
        self.devices.append(Device(id=len(self.devices), name=name, node=node, spec=spec))

    def add_link(self, a: str, b: str, kind: str, bandwidth: float, latency: float,
                 duplex: bool, field: str) -> None:
        """One declared link: a -> b, and b -> a too if ``duplex``."""
        if a == b:
            self.fields.fail(field, f"a link from {a!r} to itself; a and b must differ")
        for src, dst in ((a, b), (b, a)) if duplex else ((a, b),):
            if (src, dst) in self._pairs:
                self.fields.fail(field, f"a second link from {src!r} to {dst!r}; declare one "
                                        f"link with their combined bandwidth")
            self._pairs.add((src, dst))
            self.links.append(Link(id=len(self.links), name=f"{src}->{dst}", kind=kind,
                                   src=src, dst=dst, bandwidth=bandwidth, latency=latency))

    def cluster(self, name: str, description: str) -> Cluster:
        try:
            return Cluster(name=name, devices=self.devices, links=self.links,
                           switches=self.switches, description=description)
        except ClusterError as e:
            raise ClusterError(f"{self.fields.source}: {e}") from None
