"""Helpers the tests import (``from helpers import model, wait_for``): cached models and
clusters, hand-built clusters, waiting in a Pilot-driven app, editing and checking search
logs. Fixtures and pytest hooks live in conftest.py, which pytest loads itself; a test
never imports conftest (pytest may import it a second time under another name, with its
own caches)."""

import functools
import html
import re
import time

from flextui.graph.library import load_model
from flextui.machine import Cluster, Device, DeviceSpec, Link, load_named_cluster

#: hang protection, never an assertion: a test waits for an event (a record in a file,
#: a process's exit), and gives up only after this many seconds, far beyond what any
#: step takes on a loaded two-core machine; reaching it means a hang, not slowness
HANG_S = 900.0

#: a device kind for hand-built clusters (tests give their own cost models)
TEST_SPEC = DeviceSpec("test", 2**40, {"float32": 1e12}, 1e12)


@functools.cache
def model(name: str, **options):
    return load_model(name, **options)


@functools.cache
def cluster(name: str):
    return load_named_cluster(name)


@functools.cache
def four_gpus() -> Cluster:
    """One node of the paper's P100s: four GPUs."""
    return load_named_cluster("p100-4x4", nodes=1)


def line_cluster(n: int, bandwidth: float = 1e6, latency: float = 0.1,
                 spec: DeviceSpec = TEST_SPEC) -> Cluster:
    """``n`` devices in a row, neighbours joined by a full-duplex link (so there is no
    route from the first to the third but through the second)."""
    devices = [Device(i, f"d{i}", 0, spec) for i in range(n)]
    links = []
    for i in range(n - 1):
        for a, b in ((i, i + 1), (i + 1, i)):
            links.append(Link(len(links), f"d{a}->d{b}", "test", f"d{a}", f"d{b}", bandwidth, latency))
    return Cluster(f"line{n}", devices, links)


async def wait_for(pilot, condition, timeout=HANG_S):
    """Let a Pilot-driven app run until ``condition()`` holds (a test failure after
    ``timeout`` seconds: a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting in the app")
        await pilot.pause(0.05)


def screen_text(app) -> str:
    """What the app's screen shows, as plain text (its screenshot without the SVG)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


def assert_multi_op_steps_replay(path, graph, where, cost_model, count: int = 10) -> None:
    """The first ``count`` accepted steps of chain 0 in the log at ``path`` that set more
    than one op: the log rebuilds each one's strategy with every change it made, and that
    strategy simulates to the logged cost exactly."""
    from flextui.search import read_search_log
    from flextui.sim import Simulator

    log = read_search_log(path)
    moved = [e for e in log.steps_of(0) if e.accepted and e.others]
    assert moved
    simulator = Simulator(graph, where, cost_model)
    for e in moved[:count]:
        strategy = log.strategy_at(0, e.iteration)
        for op, config in e.changes:
            assert strategy[graph.ops[op].name] == config
        assert simulator.simulate(strategy).cost == e.proposed


def edit_log_header(path, edit) -> None:
    """Rewrite the header record of the search log at ``path`` as a hand would: decode
    it, let ``edit(header_dict)`` change it, and frame it again (checksums redone)."""
    import msgpack

    from flextui.search.logformat import FRAME, MAGIC, frame

    data = path.read_bytes()
    start = len(MAGIC) + FRAME.size
    end = start + FRAME.unpack_from(data, len(MAGIC))[0]
    record = msgpack.unpackb(data[start:end], raw=False)
    edit(record[1])
    path.write_bytes(MAGIC + frame(msgpack.packb(record, use_bin_type=True)) + data[end:])


# -- the app tests' search: LeNet on one node of the paper's P100s ---------------------

@functools.cache
def lenet_node():
    return model("lenet"), load_named_cluster("p100-4x4", nodes=1)


def start_lenet_search(app, options) -> None:
    """Start a search in ``app`` (a FlextuiApp) as its Setup screen's start key does."""
    from flextui.tui.screens.setup import SetupScreen

    graph, cluster = lenet_node()
    app.on_setup_screen_start_search(SetupScreen.StartSearch(graph, cluster, options, "lenet",
                                                             "p100-4x4"))


#: a cluster file listed device by device and link by link (the explicit form), with a
#: place to add text to each of its names: ``.format(name=..., description=..., kind=...,
#: device=..., link=...)`` (an empty string each for the plain file)
TWO_CPUS_CLUSTER = """\
name = "two{name}"
description = "two CPUs{description}"
[device_kinds."cpu{kind}"]
memory = "64GiB"
peak_flops = {{ float32 = "1 TFLOPS" }}
mem_bandwidth = "50 GB/s"
[[devices]]
name = "c0{device}"
kind = "cpu{kind}"
[[devices]]
name = "c1"
kind = "cpu{kind}"
[[switches]]
name = "sw"
[[links]]
a = "c0{device}"
b = "sw"
kind = "shm{link}"
bandwidth = "10 GB/s"
latency = "1us"
[[links]]
a = "c1"
b = "sw"
kind = "shm"
bandwidth = "10 GB/s"
latency = "1us"
"""
