"""Routes searched per kind of source (flextui.machine.routes) equal, link for link, the
per-device networkx Dijkstra they replaced (tests/route_referee.py), on every pair of
every library cluster, resized ones, CPU ranks, GPU boxes detected from nvidia-smi
samples, and irregular topologies full of equal-weight paths and unreachable devices."""

from __future__ import annotations

import random

import pytest

from flextui.errors import ClusterError
from flextui.machine import Cluster, Device, DeviceSpec, Link, load_named_cluster
from flextui.machine.detect import cpu_ranks, gpu_links
from flextui.machine.library import cluster_names
from flextui.machine.nvtopo import nvlink_lanes, parse_topology
from flextui.machine.routes import Router
from nvtopo_samples import SAMPLES
from route_referee import ReferenceRouter

SPEC = DeviceSpec("G", 2**30, {"float32": 1e12}, 1e11)


def assert_routes_equal(cluster: Cluster) -> int:
    """Every ordered pair's route equals the referee's (None where it has none), also
    through Cluster.route and route_link_ids; returns the pairs without a route."""
    names = [d.name for d in cluster.devices]
    router = Router(names, cluster.switches, cluster.links)
    referee = ReferenceRouter(cluster)
    missing = 0
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            expected = referee.route(a, b)
            assert router.route(a, b) == expected, (cluster.name, a, b)
            if expected is None:
                missing += 1
                with pytest.raises(ClusterError, match=f"no route from {a} to {b}"):
                    cluster.route(i, j)
            else:
                assert cluster.route(i, j) == expected
                assert cluster.route_link_ids(i, j) == tuple(link.id for link in expected)
    return missing


@pytest.mark.parametrize("name", cluster_names())
def test_library_clusters_route_as_the_referee(name):
    assert assert_routes_equal(load_named_cluster(name)) == 0


@pytest.mark.parametrize("name, nodes", [("h100-cluster", 2), ("h100-cluster", 8),
                                         ("p100-4x4", 1), ("k80-16x4", 2)])
def test_resized_clusters_route_as_the_referee(name, nodes):
    assert assert_routes_equal(load_named_cluster(name, nodes=nodes)) == 0


@pytest.mark.parametrize("ranks, nodes", [(2, 1), (4, 1), (3, 2)])
def test_cpu_ranks_route_as_the_referee(ranks, nodes):
    assert assert_routes_equal(cpu_ranks(ranks, nodes)) == 0


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_detected_gpu_boxes_route_as_the_referee(sample):
    devices = [Device(i, f"n0.gpu{i}", 0, SPEC) for i in range(sample.count)]
    links, switches, _ = gpu_links(devices, nvlink_lanes(parse_topology(sample.text)))
    assert assert_routes_equal(Cluster("box", devices, links, switches=switches)) == 0


def irregular(seed: int) -> Cluster:
    """A random topology: devices on a few nodes, switches, links in both or one
    direction (device to device too) whose weights are drawn from few values, so equal-
    weight paths are everywhere (2 hops at 2 GB/s weigh exactly 1 hop at 1 GB/s)."""
    rng = random.Random(seed)
    devices = [Device(i, f"d{i}", rng.randrange(3), SPEC) for i in range(rng.randint(2, 9))]
    switches = [f"s{i}" for i in range(rng.randint(0, 7))]
    ends = [d.name for d in devices] + switches
    rng.shuffle(ends)
    chance = rng.uniform(0.1, 0.6)
    wires = [(a, b) for a in ends for b in ends if a != b and rng.random() < chance]
    rng.shuffle(wires)
    links: list[Link] = []
    for a, b in wires:
        bandwidth = rng.choice((1e9, 2e9, 4e9))
        latency = rng.choice((0.0, 0.0, 1e-6, 2e-6))
        links.append(Link(len(links), f"{a}->{b}", "x", a, b, bandwidth, latency))
    return Cluster(f"irregular{seed}", devices, links, switches=switches)


def test_irregular_topologies_route_as_the_referee():
    missing = sum(assert_routes_equal(irregular(seed)) for seed in range(400))
    assert missing > 0      # unreachable pairs were among those checked


def test_a_regular_cluster_takes_one_search_per_node():
    """1,024 H100s in nodes of 8: every route the simulator may ask for from 128 switch
    searches (the GPUs of a node leave it by the same switches), not one per GPU."""
    cluster = load_named_cluster("h100-cluster", nodes=128)
    router = Router([d.name for d in cluster.devices], cluster.switches, cluster.links)
    names = [d.name for d in cluster.devices]
    rng = random.Random(0)
    for a, b in [*zip(names, names[1:] + names[:1]),
                 *((rng.choice(names), rng.choice(names)) for _ in range(2000))]:
        route = router.route(a, b)
        assert route is not None and (a == b or (route[0].src, route[-1].dst) == (a, b))
    assert router.searches == 128


def test_route_link_ids_are_memoised():
    cluster = load_named_cluster("h100-cluster")
    ids = cluster.route_link_ids(0, 9)
    assert ids == tuple(link.id for link in cluster.route(0, 9)) and len(ids) == 2
    assert cluster.route_link_ids(0, 9) is ids
    assert cluster.route_link_ids(3, 3) == ()
    with pytest.raises(ClusterError, match="no device 99"):
        cluster.route_link_ids(0, 99)
