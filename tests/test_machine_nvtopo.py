"""NVLink between the local GPUs, from `nvidia-smi topo -m`: parsing, and the links the
detected cluster gets (an NVSwitch, a direct mesh, PCIe only, or unknown), at the
bandwidth of the GPUs' NVLink generation; `flextui clusters --detect` fed the matrices
of real machines (``nvtopo_samples``) through a stand-in for torch's CUDA and nvidia-smi."""

import json
import subprocess
from types import SimpleNamespace

import pytest

from flextui.cli import main
from flextui.machine import Device, DeviceSpec, detect
from flextui.machine.cluster import Cluster
from flextui.machine.nvtopo import (
    detect_nvlink,
    is_switched,
    nvlink_lanes,
    parse_topology,
    visible_rows,
)
from nvtopo_samples import SAMPLES, fake_gpus

SPEC = DeviceSpec("A100-SXM4-80GB", 80 * 2**30, {"float32": 19.5e12}, 2.0e12)

DGX = """\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\x1b[0m
GPU0\t X \tNV12\tNV12\tNV12\tPXB\t48-63\t3
GPU1\tNV12\t X \tNV12\tNV12\tPXB\t48-63\t3
GPU2\tNV12\tNV12\t X \tNV12\tSYS\t16-31\t1
GPU3\tNV12\tNV12\tNV12\t X \tSYS\t16-31\t1
NIC0\tPXB\tPXB\tSYS\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""

MESH = """\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity
GPU0\t X \tNV2\tNV1\tSYS\t0-19
GPU1\tNV2\t X \tSYS\tNV1\t0-19
GPU2\tNV1\tSYS\t X \tNV2\t20-39
GPU3\tSYS\tNV1\tNV2\t X \t20-39
"""

PCIE = """\tGPU0\tGPU1\tCPU Affinity
GPU0\t X \tPIX\t0-31
GPU1\tPIX\t X \t0-31
"""


def gpus(n):
    return [Device(i, f"n0.gpu{i}", 0, SPEC) for i in range(n)]


def cluster(n, lanes):
    links, switches, how = detect.gpu_links(gpus(n), lanes)
    return Cluster("local", gpus(n), links, switches=switches, description=how)


def test_an_nvswitch_box_is_one_switch_at_its_lanes_bandwidth():
    lanes = nvlink_lanes(parse_topology(DGX))
    assert lanes == {(i, j): 12 for i in range(4) for j in range(i + 1, 4)}
    assert is_switched(lanes, 4, 12)
    c = cluster(4, lanes)
    route = c.route(0, 3)
    assert [link.kind for link in route] == ["nvswitch", "nvswitch"]
    assert route[0].bandwidth == 300e9
    assert "NVSwitch at 300 GB/s per GPU" in c.description


def test_a_direct_mesh_gets_a_link_per_joined_pair_and_pcie_for_the_rest():
    lanes = nvlink_lanes(parse_topology(MESH))
    assert lanes == {(0, 1): 2, (0, 2): 1, (1, 3): 1, (2, 3): 2}
    assert not is_switched(lanes, 4, 12)
    c = cluster(4, lanes)
    assert [link.kind for link in c.route(0, 1)] == ["nvlink"]
    assert c.route(0, 1)[0].bandwidth == 50e9
    assert [link.kind for link in c.route(0, 3)] == ["pcie", "pcie"]   # SYS: no NVLink


def test_pcie_only_and_unknown_say_so():
    assert nvlink_lanes(parse_topology(PCIE)) == {}
    assert "no NVLink" in cluster(2, {}).description
    assert "could not be read" in cluster(2, None).description
    assert [link.kind for link in cluster(2, None).route(0, 1)] == ["pcie", "pcie"]


@pytest.mark.parametrize("text", ["", "nvidia-smi: command failed", "GPU0\tGPU1\nGPU0\tNV4\n",
                                  DGX.replace("GPU2\tNV12\tNV12\t X", "GPU2\tNV12\tNV12\tNV12")])
def test_text_without_a_whole_matrix_is_not_read(text):
    assert parse_topology(text) is None


def test_visible_devices_pick_their_rows(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_rows(4) == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_rows(2) == [2, 3]
    assert nvlink_lanes(parse_topology(MESH), visible_rows(2)) == {(0, 1): 2}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1b2c,GPU-9f00")
    assert visible_rows(2) is None


def test_without_nvidia_smi_nvlink_is_unknown(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(subprocess, "run", missing)
    assert detect_nvlink(4) is None
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=DGX))
    assert detect_nvlink(4) == nvlink_lanes(parse_topology(DGX))
    assert detect_nvlink(8) is None                      # more GPUs than the matrix has


def test_detected_gpu_cluster_uses_the_topology(monkeypatch):
    props = SimpleNamespace(total_memory=80 * 2**30)
    cuda = SimpleNamespace(device_count=lambda: 4, get_device_name=lambda i: "NVIDIA A100-SXM4-80GB",
                           get_device_properties=lambda i: props)
    monkeypatch.setattr(detect, "detect_nvlink", lambda count: nvlink_lanes(parse_topology(DGX)))
    c = detect._gpu_cluster(SimpleNamespace(cuda=cuda))
    assert c.num_devices == 4 and "NVSwitch" in c.description
    assert {link.kind for link in c.route(1, 2)} == {"nvswitch"}


def test_a_fully_connected_mesh_is_not_taken_for_an_nvswitch():
    """Every pair NV4 on four A100s (12 links each) is a direct mesh: 3 x 4 lanes fit in
    a GPU's 12 links; every pair NV12 cannot be anything but a switch."""
    mesh = {(i, j): 4 for i in range(4) for j in range(i + 1, 4)}
    assert not is_switched(mesh, 4, 12)
    assert is_switched(dict.fromkeys(mesh, 12), 4, 12)
    assert is_switched({(0, 1): 12, (0, 2): 12, (1, 2): 12}, 3, 12)   # 3 GPUs of a DGX
    c = cluster(4, mesh)
    assert [link.kind for link in c.route(0, 3)] == ["nvlink"]
    assert c.route(0, 3)[0].bandwidth == 100e9
    assert "300 GB/s per GPU" in c.description


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_clusters_detect_gives_each_gpu_its_nvlink_bandwidth(monkeypatch, capsys, sample):
    fake_gpus(monkeypatch, sample.gpu, sample.count, sample.text)
    assert main(["clusters", "--detect", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["cluster"]
    assert summary["devices"] == sample.count
    nvlink = {name: sent - detect.PCIE_BANDWIDTH
              for name, sent in summary["injection_bandwidth"].items()}
    if sample.switched:
        assert set(summary["links"]) == {"pcie", "nvswitch"}
        assert set(nvlink.values()) == {sample.per_gpu}
        assert f"NVSwitch at {sample.per_gpu / 1e9:g} GB/s per GPU" in summary["description"]
    else:
        assert "nvswitch" not in summary["links"]
        assert set(nvlink.values()) == {sample.per_gpu}
    assert "estimated=True" not in summary["description"]


def test_an_unknown_gpus_nvlink_is_assumed_and_says_so(monkeypatch, capsys):
    fake_gpus(monkeypatch, "Mystery GPU 9000", 8, SAMPLES[0].text)
    assert main(["clusters", "--detect", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["cluster"]
    assert summary["links"]["nvswitch"]["bandwidth"] == 12 * 25e9
    assert "NVLink of Mystery-GPU-9000 is not known" in summary["description"]
