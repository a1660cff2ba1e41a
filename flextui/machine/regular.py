"""The regular layout: [nodes] (count x gpus_per_node GPUs of one kind), [intra_node]
(how the GPUs of a node connect) and [inter_node] (how nodes connect, through the
network switch "net"), expanded into devices, switches and links."""

from __future__ import annotations

import re

from flextui.limits import DEVICES, LINKS
from flextui.machine.fields import Fields
from flextui.machine.layout import Layout

__all__ = ["build_regular"]

NODES_KEYS = ("count", "gpus_per_node", "device")
INTRA_KEYS = ("topology", "kind", "bandwidth", "latency", "switch", "links")
INTER_KEYS = ("kind", "bandwidth", "latency", "attach")
TOPOLOGIES = ("all-to-all", "switch")
NETWORK_SWITCH = "net"

_LOCAL_GPU = re.compile(r"^gpu(\d+)$")

# A node-local link: a, b (local names), kind, bandwidth, latency, duplex, field.
_LocalLink = tuple[str, str, str, float, float, bool, str]


def build_regular(data: dict, layout: Layout) -> None:
    """Lay out the nodes of ``data`` (which has a [nodes] table) into ``layout``. The
    devices and links the numbers imply are counted against flextui's limits before
    anything is built."""
    f = layout.fields
    nodes = f.table(data["nodes"], "nodes")
    f.check_keys(nodes, NODES_KEYS, "nodes")
    count = f.integer(f.required(nodes, "count", "nodes", "count = 4"), "nodes.count", 1)
    gpus = f.integer(f.required(nodes, "gpus_per_node", "nodes", "gpus_per_node = 4"),
                     "nodes.gpus_per_node", 1)
    f.within(DEVICES, count * gpus, "nodes", f"{count:,} nodes x {gpus:,} GPUs per node = ")
    spec = layout.spec(f.required(nodes, "device", "nodes", 'device = "P100"'), "nodes.device")
    gpu_names = [f"gpu{i}" for i in range(gpus)]

    local: list[_LocalLink] = []
    local_switches: list[str] = []
    topology = None
    if "intra_node" in data:
        topology = _intra_node(f, data["intra_node"], gpu_names, local, local_switches)
    elif gpus > 1:
        f.fail("intra_node", f"missing: nodes.gpus_per_node = {gpus} but there is no "
                             f"[intra_node] table saying how the GPUs of a node connect")

    inter = None
    if "inter_node" in data:
        inter = _inter_node(f, data["inter_node"], gpu_names, local_switches,
                            topology[0] if topology else None)
    elif count > 1:
        f.fail("inter_node", f"missing: nodes.count = {count} but there is no "
                             f"[inter_node] table saying how nodes connect")

    per_node = _directed_links(local, topology, gpus) + (2 * len(inter[1]) if count > 1
                                                           and inter is not None else 0)
    all_to_all = topology is not None and topology[0] == "all-to-all"
    f.within(LINKS, count * per_node, "intra_node.topology" if all_to_all else "nodes",
             f"{count:,} nodes x {per_node:,} directed links per node = ")
    local[:0] = _topology_links(topology, gpu_names, local_switches)

    for n in range(count):
        for i in range(gpus):
            layout.add_device(f"n{n}.gpu{i}", n, spec)
    for n in range(count):
        layout.switches.extend(f"n{n}.{s}" for s in local_switches)
    if count > 1:
        layout.switches.append(NETWORK_SWITCH)
    for n in range(count):
        for a, b, kind, bandwidth, latency, duplex, field in local:
            layout.add_link(f"n{n}.{a}", f"n{n}.{b}", kind, bandwidth, latency, duplex, field)
    if count > 1 and inter is not None:
        (kind, bandwidth, latency), attach = inter
        for n in range(count):
            for end in attach:
                layout.add_link(f"n{n}.{end}", NETWORK_SWITCH, kind, bandwidth, latency, True,
                                "inter_node")


# The intra_node topology of a node: its kind, link properties (kind, bandwidth, latency).
_Topology = tuple[str, tuple[str, float, float]]


def _directed_links(local: list[_LocalLink], topology: _Topology | None, gpus: int) -> int:
    """The directed links inside one node: the topology's and the listed ones."""
    listed = sum(2 if link[5] else 1 for link in local)
    if topology is None:
        return listed
    return listed + (gpus * (gpus - 1) if topology[0] == "all-to-all" else 2 * gpus)


def _topology_links(topology: _Topology | None, gpu_names: list[str],
                    local_switches: list[str]) -> list[_LocalLink]:
    """The node-local links the topology makes: a link between every pair of GPUs, or
    from every GPU to the node switch (the first local switch)."""
    if topology is None:
        return []
    name, (kind, bandwidth, latency) = topology
    if name == "all-to-all":
        return [(a, b, kind, bandwidth, latency, True, "intra_node")
                for i, a in enumerate(gpu_names) for b in gpu_names[i + 1:]]
    return [(g, local_switches[0], kind, bandwidth, latency, True, "intra_node")
            for g in gpu_names]


def _intra_node(f: Fields, value: object, gpu_names: list[str], local: list[_LocalLink],
                local_switches: list[str]) -> _Topology | None:
    """Read [intra_node]: its listed links into ``local``, its switches into
    ``local_switches`` (a switch topology's first); return its topology, if any."""
    intra = f.table(value, "intra_node")
    f.check_keys(intra, INTRA_KEYS, "intra_node")
    topology = None
    if "topology" in intra:
        name = f.string(intra["topology"], "intra_node.topology")
        if name not in TOPOLOGIES:
            f.fail("intra_node.topology",
                   f"unknown topology {name!r}; use \"all-to-all\" or \"switch\", "
                   f"or list [[intra_node.links]]")
        topology = (name, f.link_props(intra, "intra_node"))
        if name == "switch":
            switch = f.name(intra.get("switch", topology[1][0]), "intra_node.switch")
            if _LOCAL_GPU.match(switch):
                f.fail("intra_node.switch", f"{switch!r} names a GPU; pick a switch "
                                            f"name such as \"nvswitch\"")
            local_switches.append(switch)
    else:
        for key in ("kind", "bandwidth", "latency", "switch"):
            if key in intra:
                f.fail(f"intra_node.{key}",
                       'is set but there is no topology to use it; add topology = '
                       '"all-to-all" or "switch", or move it into [[intra_node.links]]')
        if "links" not in intra:
            f.fail("intra_node", 'says nothing; add topology = "all-to-all" or '
                                 '"switch" (with kind, bandwidth, latency), or '
                                 '[[intra_node.links]]')
    if "links" in intra:
        gpus = len(gpu_names)
        links = f.array_of_tables(intra["links"], "intra_node.links")
        f.within(LINKS, len(links), "intra_node.links", "listed: ")
        known = set(local_switches)
        for i, t in enumerate(links):
            field = f"intra_node.links[{i}]"
            a, b, kind, bandwidth, latency, duplex = f.link_spec(t, field)
            for end, key in ((a, "a"), (b, "b")):
                m = _LOCAL_GPU.match(end)
                if m and int(m[1]) >= gpus:
                    f.fail(f"{field}.{key}", f"{end!r} but a node has only {gpus} "
                                             f"GPUs (gpu0..gpu{gpus - 1})")
                if not m and end not in known:
                    known.add(end)
                    local_switches.append(end)
            local.append((a, b, kind, bandwidth, latency, duplex, field))
    return topology


def _inter_node(f: Fields, value: object, gpu_names: list[str], local_switches: list[str],
                topology: str | None) -> tuple[tuple[str, float, float], list[str]]:
    """Read [inter_node]: the link properties, and what each node wires to the network."""
    inter = f.table(value, "inter_node")
    f.check_keys(inter, INTER_KEYS, "inter_node")
    props = f.link_props(inter, "inter_node")
    attach: list[str] = []
    if "attach" in inter:
        raw = inter["attach"]
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            f.fail("inter_node.attach", "is empty; name what each node wires to the "
                                        "network")
        endpoints, named = {*gpu_names, *local_switches}, set()
        for item in items:
            item = f.name(item, "inter_node.attach")
            if item in named:
                f.fail("inter_node.attach", f"names {item!r} twice")
            named.add(item)
            if item == "gpus":
                attach.extend(gpu_names)
            elif item in endpoints:
                attach.append(item)
            else:
                known = ", ".join(gpu_names[:4] + ["..."] * (len(gpu_names) > 4)
                                  + local_switches[:8])
                f.fail("inter_node.attach",
                       f"{item!r} is not in a node (node-local endpoints: {known}); "
                       f"use one of them, or \"gpus\" for one link per GPU")
    elif topology == "switch":
        attach = [local_switches[0]]
    else:
        attach = list(gpu_names)
    if len(set(attach)) != len(attach):
        f.fail("inter_node.attach", "names an endpoint twice")
    return props, attach
