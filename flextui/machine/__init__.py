"""Clusters: compute devices, switches and directed links, routes between devices
(shortest paths), the TOML cluster format, the built-in cluster library, and local detection."""

from flextui.machine.cluster import Cluster, Device, DeviceSpec, Link
from flextui.machine.detect import describe_local, detect_local
from flextui.machine.library import cluster_names, load_named_cluster
from flextui.machine.toml import load_cluster, parse_cluster
from flextui.machine.units import parse_bandwidth, parse_bytes, parse_duration, parse_flops

__all__ = ["Cluster", "Device", "DeviceSpec", "Link", "describe_local", "detect_local",
           "cluster_names", "load_named_cluster", "load_cluster", "parse_cluster",
           "parse_bandwidth", "parse_bytes", "parse_duration", "parse_flops"]
