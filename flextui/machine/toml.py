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
                                      # also bfloat16, and tfloat32 (float32 on TF32
                                      # tensor cores); a single value means float32 only
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

import tomllib
from pathlib import Path

from flextui.errors import ClusterError
from flextui.fields import describe
from flextui.limits import CLUSTER_FILE_BYTES, TEXT_CHARS, nesting_problem, parsing, read_file
from flextui.machine.cluster import PEAK_NAMES, Cluster, DeviceSpec
from flextui.machine.explicit import build_explicit
from flextui.machine.fields import Fields
from flextui.machine.layout import Layout
from flextui.machine.regular import build_regular
from flextui.machine.units import parse_bandwidth, parse_bytes, parse_flops

__all__ = ["load_cluster", "parse_cluster"]

TOP_KEYS = ("name", "description", "device_kinds", "nodes", "intra_node", "inter_node",
            "devices", "switches", "links")
KIND_KEYS = ("memory", "peak_flops", "mem_bandwidth")


def load_cluster(path: str | Path) -> Cluster:
    """Read and parse a cluster file; every problem is a ClusterError naming the file."""
    p = Path(path)
    try:
        raw = read_file(p, CLUSTER_FILE_BYTES)
    except FileNotFoundError:
        raise ClusterError(f"{p}: no such cluster file; give a path to a .toml file or a "
                           f"built-in cluster name (see `flextui clusters`)") from None
    except OSError as e:
        raise ClusterError(f"{p}: cannot read the cluster file ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ClusterError(f"{p}: not a UTF-8 text file; a cluster file is TOML text") from None
    with parsing(str(p)):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ClusterError(f"{p}: TOML syntax error: {e}") from None
    return parse_cluster(data, str(p))


def parse_cluster(data: dict, source: str = "<cluster>") -> Cluster:
    """Build a Cluster from parsed TOML ``data``; ``source`` names it in error messages."""
    f = Fields(source)
    if not isinstance(data, dict):
        f.fail("", f"a cluster description must be a table, found {describe(data)}")
    nesting = nesting_problem(data)
    if nesting is not None:
        f.fail("", nesting)
    f.check_keys(data, TOP_KEYS, "")
    default_name = Path(source).stem if source and not source.startswith("<") else "cluster"
    name = f.string(data.get("name", default_name), "name")
    description = f.string(data.get("description", ""), "description", TEXT_CHARS,
                           empty=True, lines=True)
    specs = _device_kinds(f, f.required(data, "device_kinds", "",
                                        '[device_kinds.P100] with memory, peak_flops and '
                                        'mem_bandwidth'))
    layout = Layout(f, specs)
    regular = "nodes" in data
    explicit = [k for k in ("devices", "switches", "links") if k in data]
    if regular and explicit:
        f.fail(explicit[0], "a cluster is laid out either regularly ([nodes]) or "
                            "explicitly ([[devices]], [[switches]], [[links]]), not both")
    if regular:
        build_regular(data, layout)
    else:
        for key in ("intra_node", "inter_node"):
            if key in data:
                f.fail(key, f"[{key}] only goes with a regular layout; add a [nodes] "
                            f"table (count, gpus_per_node, device)")
        if "devices" not in data:
            f.fail("nodes", "no devices: add a [nodes] table (count, gpus_per_node, "
                            "device) or [[devices]] entries (name, kind, node)")
        build_explicit(data, layout)
    return layout.cluster(name, description)


def _device_kinds(f: Fields, value: object) -> dict[str, DeviceSpec]:
    """Read [device_kinds]: one DeviceSpec per kind, by name."""
    kinds = f.table(value, "device_kinds")
    if not kinds:
        f.fail("device_kinds", "no device kinds; add e.g. [device_kinds.P100] with "
                               "memory, peak_flops and mem_bandwidth")
    specs: dict[str, DeviceSpec] = {}
    for kind, spec in kinds.items():
        field = f"device_kinds.{f.string(kind, 'device_kinds')}"
        spec = f.table(spec, field)
        f.check_keys(spec, KIND_KEYS, field)
        memory = f.quantity(parse_bytes, f.required(spec, "memory", field, 'memory = "16GiB"'),
                            f"{field}.memory")
        flops_value = f.required(spec, "peak_flops", field,
                                 'peak_flops = { float32 = "10.6 TFLOPS" }')
        if isinstance(flops_value, dict):
            f.check_keys(flops_value, PEAK_NAMES, f"{field}.peak_flops")
            if "float32" not in flops_value:
                f.fail(f"{field}.peak_flops.float32",
                       'missing; peak_flops needs at least float32, e.g. '
                       'peak_flops = { float32 = "10.6 TFLOPS" }')
            flops = {d: f.quantity(parse_flops, v, f"{field}.peak_flops.{d}")
                     for d, v in flops_value.items()}
        else:
            flops = {"float32": f.quantity(parse_flops, flops_value, f"{field}.peak_flops")}
        bandwidth = f.quantity(parse_bandwidth,
                               f.required(spec, "mem_bandwidth", field,
                                          'mem_bandwidth = "732 GB/s"'),
                               f"{field}.mem_bandwidth")
        try:
            specs[kind] = DeviceSpec(kind=kind, memory_bytes=memory, peak_flops=flops,
                                     mem_bandwidth=bandwidth)
        except ClusterError as e:
            f.fail(field, str(e))
    return specs
