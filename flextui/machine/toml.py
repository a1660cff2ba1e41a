'''Cluster files: load a TOML description into a :class:`~flextui.machine.cluster.Cluster`.

The format
==========

A cluster file names its device kinds, then lays devices out either *regularly*
(nodes x GPUs, with one rule for links inside a node and one between nodes) or
*explicitly* (every device, switch and link listed). Quantities are strings with units
or plain numbers in base units (bytes, bytes/s, seconds, FLOP/s); see
:mod:`flextui.machine.units`. Every link is full duplex unless it says ``duplex = false``:
one declared link becomes two directed links, one per direction, each with the full
bandwidth (give bandwidth *per direction*). Only switches forward traffic; a GPU never
relays a transfer between two others.

.. code-block:: toml

    name = "p100-4x4"                 # optional; defaults to the file name
    description = "4 nodes x 4 P100"  # optional

    [device_kinds.P100]               # one table per device kind used
    memory = "16GiB"
    peak_flops = { float32 = "10.6 TFLOPS", float16 = "21.2 TFLOPS" }  # float32 required;
                                      # also bfloat16; a single value means float32 only
    mem_bandwidth = "732 GB/s"

    # ---- EITHER a regular layout ----
    [nodes]
    count = 4                         # nodes, named n0 .. n3
    gpus_per_node = 4                 # devices n0.gpu0 .. n0.gpu3, n1.gpu0, ...
    device = "P100"                   # a key of [device_kinds]

    [intra_node]                      # how the GPUs of a node connect (needed if gpus_per_node > 1)
    topology = "all-to-all"           # a link between every pair of GPUs, or "switch":
                                      # every GPU linked to one node switch
    kind = "nvlink"                   # link kind (nvlink, nvswitch, pcie, qpi, shm, ...)
    bandwidth = "20 GB/s"             # per direction
    latency = "2us"                   # per hop
    # switch = "nvswitch"             # topology = "switch" only: the switch's local name
    #                                 # (default: the link kind), e.g. n0.nvswitch

    # and/or explicit node-local links (with or without a topology). Local endpoint
    # names: "gpu0" .. "gpu<N-1>" are the node's GPUs; any other name is a switch inside
    # each node (e.g. "plx0", "cpu", "nic"), named n<k>.<local> in the cluster.
    [[intra_node.links]]
    a = "gpu0"
    b = "cpu"
    kind = "pcie"
    bandwidth = "12 GB/s"
    latency = "1us"
    # duplex = true                   # false: only a -> b

    [inter_node]                      # how nodes connect (needed if count > 1)
    kind = "infiniband"
    bandwidth = "100 Gb/s"            # per direction, per attached endpoint
    latency = "2us"
    attach = "nic"                    # what each node wires to the global switch "net": a
                                      # node-local name, a list of them, or "gpus" (one link
                                      # per GPU: rails). Default: the node switch when
                                      # topology = "switch", else "gpus".

    # ---- OR an explicit layout ----
    [[devices]]                       # ids follow the order listed
    name = "cpu0"
    kind = "cpu"                      # a key of [device_kinds]
    node = 0                          # optional, default 0
    [[switches]]
    name = "sw0"                      # (switches = ["sw0", ...] works too)
    [[links]]
    a = "cpu0"
    b = "sw0"
    kind = "shm"
    bandwidth = "10 GB/s"
    latency = "1us"
    duplex = true                     # optional, default true

Every problem is a :class:`~flextui.errors.ClusterError` naming the file, the field
(``intra_node.bandwidth``, ``links[2].b``), what was found and what to write instead.
Unknown keys are refused (they are usually typos).
'''

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, NoReturn

from flextui.errors import ClusterError
from flextui.machine.cluster import DTYPES, Cluster, Device, DeviceSpec, Link
from flextui.machine.units import parse_bandwidth, parse_bytes, parse_duration, parse_flops

__all__ = ["load_cluster", "parse_cluster"]

TOP_KEYS = ("name", "description", "device_kinds", "nodes", "intra_node", "inter_node",
            "devices", "switches", "links")
KIND_KEYS = ("memory", "peak_flops", "mem_bandwidth")
NODES_KEYS = ("count", "gpus_per_node", "device")
INTRA_KEYS = ("topology", "kind", "bandwidth", "latency", "switch", "links")
INTER_KEYS = ("kind", "bandwidth", "latency", "attach")
LINK_KEYS = ("a", "b", "kind", "bandwidth", "latency", "duplex")
DEVICE_KEYS = ("name", "kind", "node")
TOPOLOGIES = ("all-to-all", "switch")
NETWORK_SWITCH = "net"

_LOCAL_GPU = re.compile(r"^gpu(\d+)$")
_NAME = re.compile(r"^[^\s]+$")


def load_cluster(path: str | Path) -> Cluster:
    """Read and parse a cluster file; every problem is a ClusterError naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ClusterError(f"{p}: no such cluster file; give a path to a .toml file or a "
                           f"built-in cluster name (see `flextui clusters`)") from None
    except OSError as e:
        raise ClusterError(f"{p}: cannot read the cluster file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ClusterError(f"{p}: not a UTF-8 text file; a cluster file is TOML text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"{p}: TOML syntax error: {e}") from None
    return parse_cluster(data, str(p))


def parse_cluster(data: dict, source: str = "<cluster>") -> Cluster:
    """Build a Cluster from parsed TOML ``data``; ``source`` names it in error messages."""
    return _Parser(source).parse(data)


def _what(value: object) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
             dict: "a table", list: "an array"}
    return f"{value!r} ({names.get(type(value), type(value).__name__)})"


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.specs: dict[str, DeviceSpec] = {}
        self.devices: list[Device] = []
        self.switches: list[str] = []
        self.links: list[Link] = []
        self._pairs: set[tuple[str, str]] = set()

    # -- helpers ----------------------------------------------------------------------

    def fail(self, field: str, message: str) -> NoReturn:
        where = f"{self.source}: {field}: " if field else f"{self.source}: "
        raise ClusterError(where + message)

    def table(self, value: object, field: str) -> dict:
        if not isinstance(value, dict):
            self.fail(field, f"expected a table, found {_what(value)}; write [{field}] "
                             f"followed by its keys")
        return value

    def check_keys(self, table: dict, allowed: tuple[str, ...], field: str) -> None:
        for key in table:
            if key not in allowed:
                path = f"{field}.{key}" if field else key
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                where = f"[{field}]" if field else "the top level"
                self.fail(path, f"unknown key {key!r}; {hint}{where} takes "
                                f"{', '.join(allowed)}")

    def required(self, table: dict, key: str, field: str, example: str) -> Any:
        if key not in table:
            path = f"{field}.{key}" if field else key
            self.fail(path, f"missing required field {path!r}; add e.g. {example}")
        return table[key]

    def string(self, value: object, field: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"expected a non-empty string, found {_what(value)}")
        return value

    def name(self, value: object, field: str) -> str:
        value = self.string(value, field)
        if not _NAME.match(value) or "->" in value:
            self.fail(field, f"{value!r} is not a valid name (no spaces, no '->')")
        return value

    def integer(self, value: object, field: str, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(field, f"expected a whole number >= {minimum}, found {_what(value)}; "
                             f"write e.g. {field.rsplit('.', 1)[-1]} = {max(minimum, 4)}")
        return value

    def boolean(self, value: object, field: str) -> bool:
        if not isinstance(value, bool):
            self.fail(field, f"expected true or false, found {_what(value)}")
        return value

    def quantity(self, parse: Callable[[object], Any], value: object, field: str,
                 positive: bool = True) -> Any:
        try:
            result = parse(value)
        except ValueError as e:
            self.fail(field, str(e))
        if positive and result <= 0:
            self.fail(field, f"{value!r} must be greater than zero")
        return result

    def array_of_tables(self, value: object, field: str) -> list[dict]:
        if not isinstance(value, list):
            self.fail(field, f"expected an array of tables, found {_what(value)}; "
                             f"write [[{field}]] blocks")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.fail(f"{field}[{i}]", f"expected a table, found {_what(item)}")
        return value

    # -- the whole file ---------------------------------------------------------------

    def parse(self, data: dict) -> Cluster:
        if not isinstance(data, dict):
            self.fail("", f"a cluster description must be a table, found {_what(data)}")
        self.check_keys(data, TOP_KEYS, "")
        default_name = Path(self.source).stem if self.source and not self.source.startswith("<") \
            else "cluster"
        name = self.string(data.get("name", default_name), "name")
        description = data.get("description", "")
        if not isinstance(description, str):
            self.fail("description", f"expected a string, found {_what(description)}")
        self.parse_kinds(self.required(data, "device_kinds", "",
                                       '[device_kinds.P100] with memory, peak_flops and '
                                       'mem_bandwidth'))
        regular = "nodes" in data
        explicit = [k for k in ("devices", "switches", "links") if k in data]
        if regular and explicit:
            self.fail(explicit[0], "a cluster is laid out either regularly ([nodes]) or "
                                   "explicitly ([[devices]], [[switches]], [[links]]), not both")
        if regular:
            self.parse_regular(data)
        else:
            for key in ("intra_node", "inter_node"):
                if key in data:
                    self.fail(key, f"[{key}] only goes with a regular layout; add a [nodes] "
                                   f"table (count, gpus_per_node, device)")
            if "devices" not in data:
                self.fail("nodes", "no devices: add a [nodes] table (count, gpus_per_node, "
                                   "device) or [[devices]] entries (name, kind, node)")
            self.parse_explicit(data)
        try:
            return Cluster(name=name, devices=self.devices, links=self.links,
                           switches=self.switches, description=description)
        except ClusterError as e:
            raise ClusterError(f"{self.source}: {e}") from None

    def parse_kinds(self, value: object) -> None:
        kinds = self.table(value, "device_kinds")
        if not kinds:
            self.fail("device_kinds", "no device kinds; add e.g. [device_kinds.P100] with "
                                      "memory, peak_flops and mem_bandwidth")
        for kind, spec in kinds.items():
            field = f"device_kinds.{kind}"
            spec = self.table(spec, field)
            self.check_keys(spec, KIND_KEYS, field)
            memory = self.quantity(parse_bytes, self.required(spec, "memory", field,
                                                              'memory = "16GiB"'),
                                   f"{field}.memory")
            flops_value = self.required(spec, "peak_flops", field,
                                        'peak_flops = { float32 = "10.6 TFLOPS" }')
            if isinstance(flops_value, dict):
                self.check_keys(flops_value, DTYPES, f"{field}.peak_flops")
                if "float32" not in flops_value:
                    self.fail(f"{field}.peak_flops.float32",
                              'missing; peak_flops needs at least float32, e.g. '
                              'peak_flops = { float32 = "10.6 TFLOPS" }')
                flops = {d: self.quantity(parse_flops, v, f"{field}.peak_flops.{d}")
                         for d, v in flops_value.items()}
            else:
                flops = {"float32": self.quantity(parse_flops, flops_value, f"{field}.peak_flops")}
            bandwidth = self.quantity(parse_bandwidth,
                                      self.required(spec, "mem_bandwidth", field,
                                                    'mem_bandwidth = "732 GB/s"'),
                                      f"{field}.mem_bandwidth")
            try:
                self.specs[kind] = DeviceSpec(kind=kind, memory_bytes=memory, peak_flops=flops,
                                              mem_bandwidth=bandwidth)
            except ClusterError as e:
                self.fail(field, str(e))

    def spec(self, value: object, field: str) -> DeviceSpec:
        kind = self.string(value, field)
        if kind not in self.specs:
            known = ", ".join(self.specs) or "none"
            self.fail(field, f"unknown device kind {kind!r} (defined: {known}); add a "
                             f"[device_kinds.{kind}] table or use a defined kind")
        return self.specs[kind]

    # -- links ------------------------------------------------------------------------

    def add_link(self, a: str, b: str, kind: str, bandwidth: float, latency: float,
                 duplex: bool, field: str) -> None:
        if a == b:
            self.fail(field, f"a link from {a!r} to itself; a and b must differ")
        for src, dst in ((a, b), (b, a)) if duplex else ((a, b),):
            if (src, dst) in self._pairs:
                self.fail(field, f"a second link from {src!r} to {dst!r}; declare one link "
                                 f"with their combined bandwidth")
            self._pairs.add((src, dst))
            self.links.append(Link(id=len(self.links), name=f"{src}->{dst}", kind=kind,
                                   src=src, dst=dst, bandwidth=bandwidth, latency=latency))

    def link_props(self, table: dict, field: str) -> tuple[str, float, float]:
        kind = self.string(self.required(table, "kind", field, 'kind = "pcie"'), f"{field}.kind")
        bandwidth = self.quantity(parse_bandwidth,
                                  self.required(table, "bandwidth", field, 'bandwidth = "25 GB/s"'),
                                  f"{field}.bandwidth")
        latency = self.quantity(parse_duration,
                                self.required(table, "latency", field, 'latency = "2us"'),
                                f"{field}.latency", positive=False)
        return kind, bandwidth, latency

    def link_spec(self, table: dict, field: str) -> tuple[str, str, str, float, float, bool]:
        self.check_keys(table, LINK_KEYS, field)
        a = self.name(self.required(table, "a", field, 'a = "gpu0"'), f"{field}.a")
        b = self.name(self.required(table, "b", field, 'b = "cpu"'), f"{field}.b")
        kind, bandwidth, latency = self.link_props(table, field)
        duplex = self.boolean(table.get("duplex", True), f"{field}.duplex")
        return a, b, kind, bandwidth, latency, duplex

    # -- regular layout ---------------------------------------------------------------

    def parse_regular(self, data: dict) -> None:
        nodes = self.table(data["nodes"], "nodes")
        self.check_keys(nodes, NODES_KEYS, "nodes")
        count = self.integer(self.required(nodes, "count", "nodes", "count = 4"), "nodes.count", 1)
        gpus = self.integer(self.required(nodes, "gpus_per_node", "nodes", "gpus_per_node = 4"),
                            "nodes.gpus_per_node", 1)
        spec = self.spec(self.required(nodes, "device", "nodes", 'device = "P100"'), "nodes.device")

        # Node-local links: (a, b, kind, bandwidth, latency, duplex, field), local names.
        local: list[tuple[str, str, str, float, float, bool, str]] = []
        local_switches: list[str] = []
        gpu_names = [f"gpu{i}" for i in range(gpus)]
        topology = None
        if "intra_node" in data:
            intra = self.table(data["intra_node"], "intra_node")
            self.check_keys(intra, INTRA_KEYS, "intra_node")
            if "topology" in intra:
                topology = self.string(intra["topology"], "intra_node.topology")
                if topology not in TOPOLOGIES:
                    self.fail("intra_node.topology",
                              f"unknown topology {topology!r}; use \"all-to-all\" or \"switch\", "
                              f"or list [[intra_node.links]]")
                kind, bandwidth, latency = self.link_props(intra, "intra_node")
                if topology == "all-to-all":
                    for i in range(gpus):
                        for j in range(i + 1, gpus):
                            local.append((gpu_names[i], gpu_names[j], kind, bandwidth, latency,
                                          True, "intra_node"))
                else:
                    switch = self.name(intra.get("switch", kind), "intra_node.switch")
                    if _LOCAL_GPU.match(switch):
                        self.fail("intra_node.switch", f"{switch!r} names a GPU; pick a switch "
                                                       f"name such as \"nvswitch\"")
                    local_switches.append(switch)
                    for g in gpu_names:
                        local.append((g, switch, kind, bandwidth, latency, True, "intra_node"))
            else:
                for key in ("kind", "bandwidth", "latency", "switch"):
                    if key in intra:
                        self.fail(f"intra_node.{key}",
                                  'is set but there is no topology to use it; add topology = '
                                  '"all-to-all" or "switch", or move it into [[intra_node.links]]')
                if "links" not in intra:
                    self.fail("intra_node", 'says nothing; add topology = "all-to-all" or '
                                            '"switch" (with kind, bandwidth, latency), or '
                                            '[[intra_node.links]]')
            if "links" in intra:
                for i, t in enumerate(self.array_of_tables(intra["links"], "intra_node.links")):
                    field = f"intra_node.links[{i}]"
                    a, b, kind, bandwidth, latency, duplex = self.link_spec(t, field)
                    for end, key in ((a, "a"), (b, "b")):
                        m = _LOCAL_GPU.match(end)
                        if m and int(m[1]) >= gpus:
                            self.fail(f"{field}.{key}", f"{end!r} but a node has only {gpus} "
                                                        f"GPUs (gpu0..gpu{gpus - 1})")
                        if not m and end not in local_switches:
                            local_switches.append(end)
                    local.append((a, b, kind, bandwidth, latency, duplex, field))
        elif gpus > 1:
            self.fail("intra_node", f"missing: nodes.gpus_per_node = {gpus} but there is no "
                                    f"[intra_node] table saying how the GPUs of a node connect")

        inter = None
        attach: list[str] = []
        if "inter_node" in data:
            inter = self.table(data["inter_node"], "inter_node")
            self.check_keys(inter, INTER_KEYS, "inter_node")
            inter_props = self.link_props(inter, "inter_node")
            if "attach" in inter:
                raw = inter["attach"]
                items = raw if isinstance(raw, list) else [raw]
                if not items:
                    self.fail("inter_node.attach", "is empty; name what each node wires to the "
                                                   "network")
                for item in items:
                    item = self.name(item, "inter_node.attach")
                    if item == "gpus":
                        attach.extend(gpu_names)
                    elif item in gpu_names or item in local_switches:
                        attach.append(item)
                    else:
                        known = ", ".join(gpu_names + local_switches)
                        self.fail("inter_node.attach",
                                  f"{item!r} is not in a node (node-local endpoints: {known}); "
                                  f"use one of them, or \"gpus\" for one link per GPU")
            elif topology == "switch":
                attach = [local_switches[0]]
            else:
                attach = list(gpu_names)
            if len(set(attach)) != len(attach):
                self.fail("inter_node.attach", "names an endpoint twice")
        elif count > 1:
            self.fail("inter_node", f"missing: nodes.count = {count} but there is no "
                                    f"[inter_node] table saying how nodes connect")

        for n in range(count):
            for i in range(gpus):
                self.devices.append(Device(id=len(self.devices), name=f"n{n}.gpu{i}", node=n,
                                           spec=spec))
        for n in range(count):
            self.switches.extend(f"n{n}.{s}" for s in local_switches)
        if count > 1:
            self.switches.append(NETWORK_SWITCH)
        for n in range(count):
            for a, b, kind, bandwidth, latency, duplex, field in local:
                self.add_link(f"n{n}.{a}", f"n{n}.{b}", kind, bandwidth, latency, duplex, field)
        if count > 1 and inter is not None:
            kind, bandwidth, latency = inter_props
            for n in range(count):
                for end in attach:
                    self.add_link(f"n{n}.{end}", NETWORK_SWITCH, kind, bandwidth, latency, True,
                                  "inter_node")

    # -- explicit layout --------------------------------------------------------------

    def parse_explicit(self, data: dict) -> None:
        devices = self.array_of_tables(data["devices"], "devices")
        if not devices:
            self.fail("devices", "is empty; declare at least one [[devices]] entry")
        names: dict[str, str] = {}
        for i, t in enumerate(devices):
            field = f"devices[{i}]"
            self.check_keys(t, DEVICE_KEYS, field)
            name = self.name(self.required(t, "name", field, 'name = "gpu0"'), f"{field}.name")
            if name in names:
                self.fail(f"{field}.name", f"{name!r} is already used by {names[name]}")
            names[name] = field
            spec = self.spec(self.required(t, "kind", field, 'kind = "P100"'), f"{field}.kind")
            node = self.integer(t.get("node", 0), f"{field}.node", 0)
            self.devices.append(Device(id=len(self.devices), name=name, node=node, spec=spec))
        switches = data.get("switches", [])
        if not isinstance(switches, list):
            self.fail("switches", f"expected an array, found {_what(switches)}; write "
                                  f'[[switches]] blocks with name = "...", or switches = ["sw0"]')
        for i, s in enumerate(switches):
            field = f"switches[{i}]"
            if isinstance(s, dict):
                self.check_keys(s, ("name",), field)
                s = self.required(s, "name", field, 'name = "sw0"')
                field += ".name"
            s = self.name(s, field)
            if s in names:
                self.fail(field, f"{s!r} is already used by {names[s]}")
            names[s] = field
            self.switches.append(s)
        for i, t in enumerate(self.array_of_tables(data.get("links", []), "links")):
            field = f"links[{i}]"
            a, b, kind, bandwidth, latency, duplex = self.link_spec(t, field)
            for end, key in ((a, "a"), (b, "b")):
                if end not in names:
                    self.fail(f"{field}.{key}", f"{end!r} is neither a device nor a switch; "
                                                f"declare it in [[devices]] or [[switches]], "
                                                f"or fix the name")
            self.add_link(a, b, kind, bandwidth, latency, duplex, field)
