"""The machine layer: units, clusters, routes, the TOML format, the library, detection."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from flextui.errors import ClusterError, FlextuiError
from flextui.machine import (
    Cluster,
    Device,
    DeviceSpec,
    Link,
    cluster_names,
    describe_local,
    detect_local,
    load_cluster,
    load_named_cluster,
    parse_bandwidth,
    parse_bytes,
    parse_cluster,
    parse_duration,
    parse_flops,
)

SHIPPED = {
    "p100-4x4": (16, 4),
    "k80-16x4": (64, 16),
    "dgx-a100": (8, 1),
    "dgx-h100": (8, 1),
    "h100-cluster": (32, 4),
    "h100-single": (1, 1),
    "local-cpu": (1, 1),
}


def write(tmp_path, text: str, name: str = "c.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


GOOD_HEAD = """
name = "t"
[device_kinds.G]
memory = "16GiB"
peak_flops = { float32 = "10 TFLOPS" }
mem_bandwidth = "500 GB/s"
"""

GOOD_REGULAR = GOOD_HEAD + """
[nodes]
count = 2
gpus_per_node = 2
device = "G"
[intra_node]
topology = "all-to-all"
kind = "nvlink"
bandwidth = "20 GB/s"
latency = "2us"
[inter_node]
kind = "infiniband"
bandwidth = "100 Gb/s"
latency = "2us"
"""


def assert_contiguous(cluster: Cluster, src: int, dst: int) -> None:
    route = cluster.route(src, dst)
    assert route
    assert route[0].src == cluster.device(src).name
    assert route[-1].dst == cluster.device(dst).name
    for a, b in zip(route, route[1:]):
        assert a.dst == b.src


# -- units ------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("16GiB", 16 * 2**30), ("16 GB", 16 * 10**9), (17179869184, 17179869184),
    ("512 MiB", 512 * 2**20), ("1.5 KiB", 1536), ("100", 100), ("3 B", 3), ("2 TB", 2 * 10**12),
    ("1 kB", 1000),
])
def test_parse_bytes(value, expected):
    assert parse_bytes(value) == expected
    assert isinstance(parse_bytes(value), int)


@pytest.mark.parametrize("value", ["16 Gb", "sixteen", "16 GB/s", "-1 GB", "16 XB", True, None,
                                   "", float("nan")])
def test_parse_bytes_rejects(value):
    with pytest.raises(ValueError) as e:
        parse_bytes(value)
    assert "e.g." in str(e.value)


@pytest.mark.parametrize("value, expected", [
    ("25GB/s", 25e9), ("100Gb/s", 12.5e9), ("12.5 GB/s", 12.5e9), (25e9, 25e9),
    ("56 Gbit/s", 7e9), ("100 Gbps", 12.5e9), ("1 GiB/s", 2**30), ("3e9", 3e9), ("10 GBps", 10e9),
    ("400 Mb/s", 50e6),
])
def test_parse_bandwidth(value, expected):
    assert parse_bandwidth(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", ["25 GB", "fast", "25 GHz/s", "-3 GB/s", False, [1]])
def test_parse_bandwidth_rejects(value):
    with pytest.raises(ValueError) as e:
        parse_bandwidth(value)
    assert "is not a bandwidth" in str(e.value)


def test_parse_bandwidth_message_for_missing_per_second():
    with pytest.raises(ValueError, match=r"'25 GB' is not a bandwidth.*\"25 GB/s\".*\"100 Gb/s\""):
        parse_bandwidth("25 GB")


@pytest.mark.parametrize("value, expected", [
    ("2us", 2e-6), ("1.5 µs", 1.5e-6), ("1.5 μs", 1.5e-6), ("0.3ms", 3e-4), ("1e-6", 1e-6),
    (2e-6, 2e-6), (0, 0.0), ("5 ns", 5e-9), ("1 s", 1.0),
])
def test_parse_duration(value, expected):
    assert parse_duration(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", ["2 lightyears", "-1us", "soon", None])
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize("value, expected", [
    ("10.6 TFLOPS", 10.6e12), ("9.3e12", 9.3e12), (9.3e12, 9.3e12), ("312 TFLOP/s", 312e12),
    ("500 GFLOPS", 500e9), ("1.1 PFLOPS", 1.1e15), ("2 tflops", 2e12),
])
def test_parse_flops(value, expected):
    assert parse_flops(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", ["10 TB", "lots", "10 XFLOPS", -1.0])
def test_parse_flops_rejects(value):
    with pytest.raises(ValueError, match="FLOP/s"):
        parse_flops(value)


# -- shipped clusters -------------------------------------------------------------------


def test_library_lists_every_shipped_cluster():
    assert set(SHIPPED) <= set(cluster_names())
    assert cluster_names() == sorted(cluster_names())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_cluster_loads(name):
    c = load_named_cluster(name)
    assert (c.num_devices, c.nodes) == SHIPPED[name]
    assert c.name == name
    assert c.description
    assert [d.id for d in c.devices] == list(range(c.num_devices))
    # every pair of devices is connected
    for j in range(c.num_devices):
        if j:
            assert_contiguous(c, 0, j)
            assert_contiguous(c, j, 0)
    s = c.summary()
    assert s["devices"] == c.num_devices and s["nodes"] == c.nodes
    assert sum(s["device_kinds"].values()) == c.num_devices
    assert s["total_memory_bytes"] > 0 and s["total_peak_flops_float32"] > 0
    assert len(s["injection_bandwidth"]) == c.num_devices
    json.dumps(s)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_round_trip(name):
    c = load_named_cluster(name)
    d = c.to_dict()
    json.dumps(d)
    again = Cluster.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d
    assert again.fingerprint == c.fingerprint
    assert again == c
    assert len(c.fingerprint) == 16


def test_p100_routes():
    c = load_named_cluster("p100-4x4")
    assert [d.name for d in c.devices[:5]] == ["n0.gpu0", "n0.gpu1", "n0.gpu2", "n0.gpu3",
                                               "n1.gpu0"]
    for j in (1, 2, 3):
        route = c.route(0, j)
        assert len(route) == 1 and route[0].kind == "nvlink"
        assert route[0].bandwidth == pytest.approx(20e9)
    across = c.route(0, 5)
    assert_contiguous(c, 0, 5)
    assert any(link.kind == "infiniband" for link in across)
    assert {link.src for link in across if link.kind == "infiniband"} >= {"n0.nic", "net"}
    assert c.device(0).spec.peak_flops == {"float32": 10.6e12, "float16": 21.2e12}
    assert c.device(0).spec.flops_for("bfloat16") == 10.6e12
    assert c.device(0).spec.flops_for("torch.float16") == 21.2e12


def test_k80_routes():
    c = load_named_cluster("k80-16x4")
    r01 = c.route(0, 1)
    assert [l.name for l in r01] == ["n0.gpu0->n0.plx0", "n0.plx0->n0.gpu1"]
    r02 = c.route(0, 2)
    assert len(r02) == 4
    assert [l.dst for l in r02] == ["n0.plx0", "n0.cpu", "n0.plx1", "n0.gpu2"]
    assert all(l.kind == "pcie" for l in r02)
    assert_contiguous(c, 0, 2)
    assert_contiguous(c, 3, 60)
    assert any(l.kind == "infiniband" for l in c.route(3, 60))
    assert c.bottleneck_bandwidth([0, 1]) == pytest.approx(12e9)
    assert c.bottleneck_bandwidth([0, 4]) == pytest.approx(7e9)


def test_switch_and_rail_clusters():
    dgx = load_named_cluster("dgx-a100")
    route = dgx.route(0, 7)
    assert [l.name for l in route] == ["n0.gpu0->n0.nvswitch", "n0.nvswitch->n0.gpu7"]
    assert dgx.bottleneck_bandwidth(range(8)) == pytest.approx(300e9)
    h = load_named_cluster("h100-cluster")
    assert h.bottleneck_bandwidth(range(8)) == pytest.approx(450e9)
    assert h.bottleneck_bandwidth(range(32)) == pytest.approx(50e9)
    assert all(l.kind == "nvswitch" for l in h.route(8, 9))
    assert all(l.kind == "infiniband" for l in h.route(0, 8))


def test_route_to_self_and_bottleneck_edge_cases():
    c = load_named_cluster("p100-4x4")
    for i in range(c.num_devices):
        assert c.route(i, i) == ()
    assert c.bottleneck_bandwidth([3]) == math.inf
    assert c.bottleneck_bandwidth([]) == math.inf
    assert c.route(0, 5) is c.route(0, 5)  # cached
    with pytest.raises(ClusterError, match="no device 99"):
        c.route(0, 99)


def test_single_device_clusters():
    for name in ("h100-single", "local-cpu"):
        c = load_named_cluster(name)
        assert c.links == [] and c.route(0, 0) == ()
        assert c.bottleneck_bandwidth([0]) == math.inf


def test_hashable_values():
    c = load_named_cluster("dgx-h100")
    assert len({d for d in c.devices}) == 8
    assert len({d.spec for d in c.devices}) == 1
    assert len(set(c.links)) == len(c.links)
    assert hash(c) == hash(load_named_cluster("dgx-h100"))


# -- building clusters in code ----------------------------------------------------------


def spec(kind="G"):
    return DeviceSpec(kind=kind, memory_bytes=2**30, peak_flops={"float32": 1e12},
                      mem_bandwidth=1e11)


def test_cluster_validation():
    d0, d1 = Device(0, "a", 0, spec()), Device(1, "b", 0, spec())
    ok = Cluster("x", [d0, d1], [Link(0, "a->b", "pcie", "a", "b", 1e9, 0.0)])
    assert [l.name for l in ok.route(0, 1)] == ["a->b"]
    with pytest.raises(ClusterError, match="no route from b to a"):
        ok.route(1, 0)
    with pytest.raises(ClusterError, match="at least one"):
        Cluster("x", [], [])
    with pytest.raises(ClusterError, match="used twice"):
        Cluster("x", [d0, Device(1, "a", 0, spec())], [])
    with pytest.raises(ClusterError, match="neither a device nor a switch"):
        Cluster("x", [d0, d1], [Link(0, "a->z", "pcie", "a", "z", 1e9, 0.0)])
    with pytest.raises(ClusterError, match="bandwidth must be from 1 to 1e"):
        Cluster("x", [d0, d1], [Link(0, "a->b", "pcie", "a", "b", 0.0, 0.0)])
    for latency in (-1.0, 1e308, float("nan")):
        with pytest.raises(ClusterError, match="latency must be from 0 to 3600 s"):
            Cluster("x", [d0, d1], [Link(0, "a->b", "pcie", "a", "b", 1e9, latency)])
    with pytest.raises(ClusterError, match="different specs"):
        Cluster("x", [d0, Device(1, "b", 0, DeviceSpec("G", 2**31, {"float32": 1e12}, 1e11))], [])
    with pytest.raises(ClusterError, match="float32"):
        DeviceSpec("G", 2**30, {"float16": 1e12}, 1e11)
    with pytest.raises(ClusterError, match="malformed"):
        Cluster.from_dict({"name": "x"})


def test_devices_never_forward_traffic():
    # a - b - c chained through device b: a cannot reach c.
    devs = [Device(i, n, 0, spec()) for i, n in enumerate("abc")]
    links = [Link(0, "a->b", "nvlink", "a", "b", 1e9, 0.0), Link(1, "b->c", "nvlink", "b", "c", 1e9, 0.0)]
    c = Cluster("chain", devs, links)
    assert len(c.route(0, 1)) == 1 and len(c.route(1, 2)) == 1
    with pytest.raises(ClusterError, match="no route from a to c"):
        c.route(0, 2)


def test_route_prefers_bandwidth_then_hops():
    devs = [Device(0, "a", 0, spec()), Device(1, "b", 0, spec())]
    links = [Link(0, "a->slow", "x", "a", "slow", 1e9, 0.0), Link(1, "slow->b", "x", "slow", "b", 1e9, 0.0),
             Link(2, "a->f1", "x", "a", "f1", 100e9, 1e-6), Link(3, "f1->f2", "x", "f1", "f2", 100e9, 1e-6),
             Link(4, "f2->b", "x", "f2", "b", 100e9, 1e-6),
             Link(5, "a->f3", "x", "a", "f3", 100e9, 1e-6), Link(6, "f3->b", "x", "f3", "b", 100e9, 1e-6)]
    c = Cluster("choice", devs, links, switches=["slow", "f1", "f2", "f3"])
    assert [l.name for l in c.route(0, 1)] == ["a->f3", "f3->b"]


# -- the TOML format --------------------------------------------------------------------


def test_regular_layout_defaults(tmp_path):
    c = load_cluster(write(tmp_path, GOOD_REGULAR))
    assert c.num_devices == 4 and c.nodes == 2 and c.switches == ["net"]
    # all-to-all: every GPU gets its own link to "net"
    assert {l.src for l in c.links if l.kind == "infiniband" and l.dst == "net"} == \
        {"n0.gpu0", "n0.gpu1", "n1.gpu0", "n1.gpu1"}
    assert len(c.route(0, 1)) == 1 and len(c.route(0, 2)) == 2
    assert c.links[0].latency == pytest.approx(2e-6)


def test_switch_topology_attaches_the_node_switch(tmp_path):
    text = GOOD_REGULAR.replace('"all-to-all"', '"switch"')
    c = load_cluster(write(tmp_path, text))
    assert c.switches == ["n0.nvlink", "n1.nvlink", "net"]
    assert [l.name for l in c.route(0, 2)] == ["n0.gpu0->n0.nvlink", "n0.nvlink->net",
                                               "net->n1.nvlink", "n1.nvlink->n1.gpu0"]


def test_duplex_false_gives_one_direction(tmp_path):
    text = GOOD_HEAD + """
    [[devices]]
    name = "a"
    kind = "G"
    [[devices]]
    name = "b"
    kind = "G"
    [[links]]
    a = "a"
    b = "b"
    kind = "pcie"
    bandwidth = "1 GB/s"
    latency = 0
    duplex = false
    """
    c = load_cluster(write(tmp_path, text))
    assert [l.name for l in c.links] == ["a->b"]


def check_error(tmp_path, text: str, *fragments: str) -> ClusterError:
    path = write(tmp_path, text)
    with pytest.raises(ClusterError) as e:
        load_cluster(path)
    message = str(e.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(e.value, FlextuiError)
    return e.value


def test_missing_nodes_count(tmp_path):
    check_error(tmp_path, GOOD_REGULAR.replace("count = 2\n", ""), "nodes.count", "missing")


def test_bandwidth_without_per_second(tmp_path):
    text = GOOD_REGULAR.replace('bandwidth = "20 GB/s"', 'bandwidth = "25 GB"')
    check_error(tmp_path, text, "intra_node.bandwidth", "'25 GB' is not a bandwidth",
                '"25 GB/s"', '"100 Gb/s"')


def test_unknown_device_kind(tmp_path):
    text = GOOD_REGULAR.replace('device = "G"', 'device = "V100"')
    check_error(tmp_path, text, "nodes.device", "unknown device kind 'V100'", "G")


def test_unknown_top_level_key(tmp_path):
    text = 'nmae = "oops"\n' + GOOD_REGULAR.replace('name = "t"\n', "")
    err = check_error(tmp_path, text, "nmae", "unknown key", "did you mean 'name'")
    assert "top level" in str(err)


def test_unknown_nested_key(tmp_path):
    text = GOOD_REGULAR.replace("latency = \"2us\"\n[inter_node]", "latncy = \"2us\"\n[inter_node]")
    check_error(tmp_path, text, "intra_node.latncy", "unknown key")


def test_toml_syntax_error(tmp_path):
    err = check_error(tmp_path, GOOD_HEAD + "\n[nodes\ncount = 2\n", "TOML syntax error", "line")
    assert "line 8" in str(err)


def test_link_to_undefined_endpoint(tmp_path):
    text = GOOD_HEAD + """
    [[devices]]
    name = "a"
    kind = "G"
    [[switches]]
    name = "sw"
    [[links]]
    a = "a"
    b = "sw"
    kind = "pcie"
    bandwidth = "1 GB/s"
    latency = "1us"
    [[links]]
    a = "a"
    b = "sw9"
    kind = "pcie"
    bandwidth = "1 GB/s"
    latency = "1us"
    """
    check_error(tmp_path, text, "links[1].b", "'sw9'", "neither a device nor a switch")


def test_intra_link_to_missing_gpu(tmp_path):
    text = GOOD_HEAD + """
    [nodes]
    count = 1
    gpus_per_node = 2
    device = "G"
    [[intra_node.links]]
    a = "gpu0"
    b = "gpu2"
    kind = "nvlink"
    bandwidth = "20 GB/s"
    latency = "1us"
    """
    check_error(tmp_path, text, "intra_node.links[0].b", "gpu2", "only 2 GPUs")


def test_disconnected_explicit_cluster_routes_fail(tmp_path):
    text = GOOD_HEAD + """
    [[devices]]
    name = "n0.gpu0"
    kind = "G"
    node = 0
    [[devices]]
    name = "n1.gpu0"
    kind = "G"
    node = 1
    """
    c = load_cluster(write(tmp_path, text))
    assert c.nodes == 2
    with pytest.raises(ClusterError) as e:
        c.route(0, 1)
    assert "n0.gpu0" in str(e.value) and "n1.gpu0" in str(e.value)
    with pytest.raises(ClusterError):
        c.bottleneck_bandwidth([0, 1])


@pytest.mark.parametrize("change, fragments", [
    (('count = 2', 'count = "2"'), ("nodes.count", "whole number", "'2'")),
    (('count = 2', 'count = 0'), ("nodes.count", ">= 1")),
    (('latency = "2us"', 'latency = "2 parsecs"'), ("intra_node.latency", "duration")),
    (('memory = "16GiB"', 'memory = "16 Gb"'), ("device_kinds.G.memory", "bits")),
    (('"10 TFLOPS"', '"10 TB"'), ("device_kinds.G.peak_flops.float32", "FLOP/s")),
    (('{ float32 = "10 TFLOPS" }', '{ float16 = "10 TFLOPS" }'),
     ("device_kinds.G.peak_flops.float32", "float32")),
    (('topology = "all-to-all"', 'topology = "ring"'), ("intra_node.topology", "ring")),
    (('bandwidth = "100 Gb/s"', 'bandwidth = "0 Gb/s"'), ("inter_node.bandwidth", "greater than zero")),
    (('kind = "infiniband"', 'kind = "infiniband"\nattach = "nic"'), ("inter_node.attach", "'nic'")),
])
def test_field_errors(tmp_path, change, fragments):
    old, new = change
    assert old in GOOD_REGULAR
    check_error(tmp_path, GOOD_REGULAR.replace(old, new, 1), *fragments)


def test_missing_inter_node_for_several_nodes(tmp_path):
    text = GOOD_REGULAR.split("[inter_node]")[0]
    check_error(tmp_path, text, "inter_node", "count = 2")


def test_missing_intra_node_for_several_gpus(tmp_path):
    text = GOOD_HEAD + '[nodes]\ncount = 1\ngpus_per_node = 2\ndevice = "G"\n'
    check_error(tmp_path, text, "intra_node", "gpus_per_node = 2")


def test_both_layouts_refused(tmp_path):
    text = GOOD_REGULAR + '\n[[devices]]\nname = "x"\nkind = "G"\n'
    check_error(tmp_path, text, "devices", "not both")


def test_missing_file(tmp_path):
    with pytest.raises(ClusterError, match="no such cluster file"):
        load_cluster(tmp_path / "absent.toml")


def test_parse_cluster_from_data():
    c = parse_cluster({"name": "d", "device_kinds": {"cpu": {"memory": 2**30, "peak_flops": 1e12,
                                                             "mem_bandwidth": 1e10}},
                       "devices": [{"name": "c0", "kind": "cpu"}]}, "inline")
    assert c.num_devices == 1 and c.device(0).spec.flops_for("float16") == 1e12
    with pytest.raises(ClusterError, match="inline: device_kinds"):
        parse_cluster({"devices": []}, "inline")


# -- library and detection --------------------------------------------------------------


def test_unknown_name_lists_known_names():
    with pytest.raises(ClusterError) as e:
        load_named_cluster("nope")
    message = str(e.value)
    assert "'nope'" in message
    for name in SHIPPED:
        assert name in message
    assert "local" in message


def test_load_named_cluster_by_path(tmp_path):
    path = write(tmp_path, GOOD_REGULAR, "mine.toml")
    assert load_named_cluster(str(path)).num_devices == 4
    assert load_named_cluster(path).num_devices == 4


def test_detect_local_cpu_only():
    c = detect_local()
    assert c.num_devices == 1 and c.links == []
    d = c.device(0)
    assert d.spec.kind == "cpu" and d.spec.memory_bytes > 0 and d.spec.peak_flops["float32"] > 0
    assert "estimated" in c.description
    assert load_named_cluster("local").to_dict() == c.to_dict()
    info = describe_local()
    assert info["cuda_available"] is False and info["torch_version"]
    json.dumps(info)


def test_gpu_table_lookup():
    from flextui.machine.gpus import device_kind_name, lookup_gpu

    assert lookup_gpu("NVIDIA A100-SXM4-80GB").mem_bandwidth == pytest.approx(2039e9)
    assert lookup_gpu("NVIDIA A10G").label == "A10"
    assert lookup_gpu("NVIDIA H100 80GB HBM3").float32 == pytest.approx(67e12)
    assert lookup_gpu("NVIDIA H100 PCIe").label == "H100 PCIe"
    assert lookup_gpu("NVIDIA GH200 480GB").label.startswith("GH200")
    assert lookup_gpu("NVIDIA L40S").label == "L40S"
    assert lookup_gpu("NVIDIA L4").label == "L4"
    assert lookup_gpu("Tesla K80").float16 is None
    assert not lookup_gpu("Mystery GPU 9000").known
    assert device_kind_name("NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    assert device_kind_name("Tesla V100-SXM2-16GB") == "V100-SXM2-16GB"


def test_machine_imports_no_textual():
    import subprocess
    import sys

    code = ("import sys; sys.modules['textual'] = None; import flextui.machine; "
            "flextui.machine.load_named_cluster('p100-4x4'); "
            "assert not any(m.startswith(('flextui.strategy', 'flextui.cost', 'flextui.sim')) "
            "for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
