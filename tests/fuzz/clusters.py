"""Cluster files (TOML): library clusters and a link-by-link one, changed value by
value (types, units such as "1e308 s" or "nan GB/s", counts past the limits, names with
control characters, keys missing or unknown) or damaged as text, and files that are not
files (a FIFO, /dev/zero, a directory, a link to a device); then simulated, shown with a
strategy, searched over and listed."""

from __future__ import annotations

import os
import random
import tomllib
from pathlib import Path

from fuzz.bases import CLUSTERS, EXPLICIT_CLUSTER, Bases
from fuzz.oracle import FLEXTUI, Case
from fuzz.toml_text import dumps
from fuzz.values import ESCAPES, mutate, mutate_bytes, paths

CATEGORY = "clusters"
#: figures with units as a cluster file writes them, made absurd
UNITS = ["1e308 s", "-1us", "0 s", "nan us", "inf GB/s", "0 GB/s", "-12 GB/s", "1e400 GB/s",
         "12", "12 GB", "12 parsecs", "1e-320 GB/s", "12 GB/s GB/s", "", " ", "0x10 GB/s",
         "64GiB", "0GiB", "-1GiB", "1e30 TiB", "nan GiB", "inf TFLOPS", "0 TFLOPS",
         "1e-300 TFLOPS", "10.6 tflops", "١٢ GB/s", "12\x1b[2J GB/s"]
SPECIAL_FILES = ["/dev/zero", "fifo", "directory", "missing", "link-to-zero", "huge", "empty",
                 "binary", "link-loop"]


def _text(rng: random.Random) -> tuple[str, str]:
    source = rng.choice([*CLUSTERS, None])
    text = EXPLICIT_CLUSTER if source is None else source.read_text()
    return text, source.stem if source else "explicit"


def _mutated(rng: random.Random) -> tuple[bytes, str]:
    text, name = _text(rng)
    if rng.random() < 0.2:
        data, what = mutate_bytes(rng, text.encode())
        return data, f"{name}: {what}"
    data = tomllib.loads(text)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        places = [p for p in paths(data) if p]
        if rng.random() < 0.35:  # a figure with a unit, or a count
            figure = [p for p in places if isinstance(p[-1], str)
                      and p[-1] in ("memory", "bandwidth", "latency", "mem_bandwidth",
                                    "float32", "float16", "count", "gpus_per_node")]
            if figure:
                path = rng.choice(figure)
                target = data
                for k in path[:-1]:
                    target = target[k]
                new = rng.choice(UNITS) if path[-1] not in ("count", "gpus_per_node") else \
                    rng.choice([0, -1, 2**20, 2**63 - 1, 10**6, 8192, 8193, 1.5, "4", 1e308])
                target[path[-1]] = new
                done.append(f"{'/'.join(map(str, path))} = {new!r}"[:80])
                continue
        data, what = mutate(rng, data, places)
        done.append(what)
        if not isinstance(data, dict):
            data = {"name": data}
    if rng.random() < 0.15:  # a name with an escape, where the reader may not expect one
        data["name"] = str(data.get("name", "x")) + rng.choice(ESCAPES)
        done.append("name with a control character")
    return dumps(data).encode(), f"{name}: {'; '.join(done)}"


def special(rng: random.Random, work: Path, kind: str, name: str | Path) -> Path:
    """A "file" ``name`` in ``work`` that is ``kind`` (/dev/zero itself for that)."""
    path = work / name
    if kind == "/dev/zero":
        return Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "link-to-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link-loop":
        path.symlink_to(path)
    elif kind == "huge":
        path.write_bytes(b"# " + b"x" * (9 * 2**20) + b"\nname = 'big'\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(rng.randbytes(4096))
    return path


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    if rng.random() < 0.12:
        kind = rng.choice(SPECIAL_FILES)
        path, what = special(rng, work, kind, "cluster.toml"), f"a cluster file that is {kind}"
    else:
        path = work / "cluster.toml"
        data, what = _mutated(rng)
        path.write_bytes(data)
    target = str(path) if not path.is_relative_to(work) else path.name
    command = rng.choice(["simulate", "simulate-json", "show", "search", "launch"])
    argv = {
        "simulate": ["simulate", "-m", "lenet", "-c", target],
        "simulate-json": ["simulate", "-m", "lenet", "-c", target, "--json"],
        "show": ["show", "-m", "lenet", "-c", target, "-s",
                 rng.choice(["data-parallel", "model-parallel", "random", "expert"])],
        "search": ["search", "-m", "lenet", "-c", target, "--budget", "30", "--no-log"],
        "launch": ["launch", "--dry-run", "-m", "lenet", "-c", target],
    }[command]
    return Case(CATEGORY, index, f"{what}; {command}", [FLEXTUI, *argv], work,
                json=command == "simulate-json", long=True, codes=frozenset({0, 2, 130}))
