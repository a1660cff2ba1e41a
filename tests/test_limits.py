"""flextui's documented limits (flextui/limits.py, the table of docs/limits.md), as cluster
files meet them: a cluster of 10**30 nodes, a 10 MB name, a file nested thousands deep or
a 5,000-digit integer is refused before any work, in one message naming the file, the
field and the limit. (Strategy files, graphs, search logs and options have theirs in
their own test files.)"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from flextui.errors import FlextuiError
from flextui.limits import LIMITS
from flextui.machine import load_cluster, parse_cluster

LIMITS_DOC = Path(__file__).resolve().parents[1] / "docs" / "limits.md"

KINDS = """
[device_kinds.G]
memory = "80GiB"
peak_flops = "60 TFLOPS"
mem_bandwidth = "3 TB/s"
"""


def regular(count: int | str, gpus: int, topology: str = "switch") -> str:
    return KINDS + textwrap.dedent(f"""
        [nodes]
        count = {count}
        gpus_per_node = {gpus}
        device = "G"
        [intra_node]
        topology = "{topology}"
        kind = "nvlink"
        bandwidth = "300 GB/s"
        latency = "1us"
        [inter_node]
        kind = "ib"
        bandwidth = "50 GB/s"
        latency = "2us"
        """)


def refused(tmp_path, text: str, *fragments: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(FlextuiError) as info:
        load_cluster(path)
    message = str(info.value)
    assert str(path) in message and "Traceback" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


@pytest.mark.parametrize("count, gpus, topology, fragments", [
    (10**30, 1, "switch", ("nodes.count", "31-digit", "9,223,372,036,854,775,807")),
    (10**6, 1, "switch", ("nodes:", "1,000,000 devices", "65,536")),
    (1, 10**6, "switch", ("nodes:", "1,000,000 devices", "65,536")),
    (1, 3000, "all-to-all", ("intra_node.topology", "8,997,000 directed links", "1,048,576",
                             'topology = "switch"')),
])
def test_a_cluster_over_the_limits_is_refused_before_it_is_built(tmp_path, count, gpus,
                                                                 topology, fragments):
    refused(tmp_path, regular(count, gpus, topology), *fragments)


def test_explicit_layouts_are_counted_before_they_are_built():
    kinds = {"G": {"memory": 2**30, "peak_flops": 1e12, "mem_bandwidth": 1e10}}
    devices = [{"name": f"d{i}", "kind": "G"} for i in range(65_537)]
    with pytest.raises(FlextuiError, match=r"inline: devices: 65,537 devices .* 65,536"):
        parse_cluster({"device_kinds": kinds, "devices": devices}, "inline")


def test_names_nesting_and_huge_integers_in_a_cluster_file(tmp_path):
    refused(tmp_path, 'name = "' + "x" * 1_000_000 + '"\n' + regular(1, 1),
            "name:", "1,000,000 characters", "256")
    refused(tmp_path, "a = " + "[" * 5000 + "]" * 5000 + "\n" + KINDS, "nested deeper", "32")
    refused(tmp_path, "a = " + "[" * 40 + "]" * 40 + "\n" + KINDS, "nested deeper", "32")
    refused(tmp_path, "a = " + "9" * 5000 + "\n" + KINDS, "integer", "9,223,372,036,854,775,807")
    refused(tmp_path, regular(1, 1).replace('"60 TFLOPS"', "9" * 400),
            "device_kinds.G.peak_flops", "400-digit integer")
    refused(tmp_path, regular(1, 1).replace('"80GiB"', "1" + "0" * 30),
            "device_kinds.G.memory", "larger than flextui's limit")


@pytest.mark.slow
def test_the_largest_regular_cluster_passes_the_count(tmp_path):
    """65,536 devices (8,192 nodes of 8 all-to-all GPUs, 589,824 links) are within the
    limits: the count refuses nothing a real cluster needs."""
    path = tmp_path / "big.toml"
    path.write_text(regular(8192, 8, "all-to-all"))
    big = load_cluster(path)
    assert big.num_devices == 65_536 and len(big.links) == 589_824


def test_the_limits_doc_lists_every_limit():
    rows = dict(re.findall(r"^\| ([a-z ]+) \| ([0-9,]+) \|", LIMITS_DOC.read_text(), re.M))
    assert {name: int(value.replace(",", "")) for name, value in rows.items()} == LIMITS
    assert LIMITS["devices per cluster"] >= 65_536
