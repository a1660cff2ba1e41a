"""Files people and other machines hand flextui, through the command line: a "file"
that is a FIFO or a device, or too big, is refused before it is read; what a strategy
file says it was made for is checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from flextui.cli import main

RAW = ("\x1b", "\x07", "\x9b")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, argv, *fragments):
    """``argv`` exits 2 with one line naming each of ``fragments``, and nothing raw."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert not any(c in out + err for c in RAW), repr(out + err)
    assert err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# -- strategy files ----------------------------------------------------------


@pytest.fixture
def dp_json(capsys, tmp_path):
    """lenet's data-parallel strategy on local-cpu-4, as a file's data."""
    path = tmp_path / "dp.json"
    assert run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", "data-parallel",
               "--export", path)[0] == 0
    return json.loads(path.read_text())


# -- cluster files -----------------------------------------------------------

CLUSTER = """\
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
PLACES = ("name", "description", "kind", "device", "link")


def toml_string(text: str) -> str:
    """``text`` inside a TOML basic string: control characters as \\uXXXX escapes."""
    return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 else c
                   for c in text)


def cluster_file(tmp_path, **escapes) -> str:
    path = tmp_path / "two.toml"
    path.write_text(CLUSTER.format(**{p: toml_string(escapes.get(p, "")) for p in PLACES}))
    return path


# -- what is not a file, or is too big ------------------------------------------------


def _flextui(tmp_path, *argv):
    """``flextui argv`` in a process of its own (a FIFO would block the test's own), with
    a generous limit against a hang; the test asserts what it prints."""
    return subprocess.run([sys.executable, "-m", "flextui", *map(str, argv)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero", "directory"])
def test_a_file_that_is_not_a_file_is_refused_unread(tmp_path, kind):
    """A cluster, strategy, search log or host file that is a FIFO (which would wait for
    a writer forever), /dev/zero (which never ends) or a directory."""
    path = tmp_path / "c.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/zero" if kind == "dev-zero" else path
        if kind == "link-to-dev-zero":
            path.symlink_to("/dev/zero")
    what = {"fifo": "a FIFO (a named pipe)",
            "directory": "a directory"}.get(kind, "a character device")
    for argv in (["simulate", "-m", "lenet", "-c", path],
                 ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path],
                 ["replay", path, "--headless"],
                 ["launch", "-m", "lenet", "-c", "local-cpu-2", "--hostfile", path, "--dry-run"]):
        done = _flextui(tmp_path, *argv)
        assert done.returncode == 2 and f"{path}: {what}, not a regular file" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_cluster_file_over_its_size_limit_is_refused_unread(capsys, tmp_path):
    path = cluster_file(tmp_path)
    with open(path, "a") as f:
        f.write(("# " + "x" * 1022 + "\n") * 9 * 1024)   # 9 MiB of comments
    refused(capsys, ["simulate", "-m", "lenet", "-c", path],
            "bytes in a cluster file is over flextui's limit of 8,388,608",
            "regular layout")


# -- what a strategy file says it was made for ----------------------------------------


@pytest.mark.parametrize("edit, message", [
    *[(lambda d, v=v: d.update(devices=v), "devices: expected a whole number >= 1")
      for v in (0, -1, float("nan"), float("inf"))],
    (lambda d: d.update(graph=None), "graph: expected a non-empty string, found None"),
    (lambda d: d.update(graph="0123456789abcdef"), "was made for another graph"),
    (lambda d: d.update(graph="not a fingerprint"), "graph: expected the fingerprint"),
    (lambda d: d.pop("graph"), "does not say which graph it was made for"),
    (lambda d: d.update(devcies=4), "unknown key 'devcies'; did you mean 'devices'"),
    (lambda d: d["ops"]["fc1"].update(device=[0]), "did you mean 'devices'"),
], ids=["devices-0", "devices-1", "devices-nan", "devices-inf", "graph-null",
        "graph-other", "graph-garbage", "graph-missing", "typo", "op-typo"])
def test_show_refuses_a_strategy_file_that_was_not_made_for_this_graph(capsys, tmp_path,
                                                                       dp_json, edit, message):
    edit(dp_json)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dp_json))
    refused(capsys, ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path], str(path), message)


def test_devices_of_1e400_in_a_strategy_file_is_refused(capsys, tmp_path, dp_json):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dp_json).replace('"devices": 4,', '"devices": 1e400,'))
    assert "1e400" in path.read_text()
    refused(capsys, ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path],
            "devices: expected a whole number >= 1, found inf")
