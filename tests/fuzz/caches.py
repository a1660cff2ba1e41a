"""Profile caches and communication calibrations (msgpack documents with a checksum):
a real CPU profile and calibration, changed value by value (times NaN, negative or
huge; keys of another device, dtype or shape; the device kind with control
characters; the version, the format) with the checksum redone so the change reaches
the field checks, or damaged as bytes; files that are not files. Then shown, merged,
and used by a profiled simulation, search and cluster description."""

from __future__ import annotations

import random
import shutil
import zlib
from pathlib import Path

import msgpack

from fuzz.bases import Bases
from fuzz.clusters import special
from fuzz.oracle import FLEXTUI, Case
from fuzz.values import mutate, mutate_bytes, paths

CATEGORY = "caches"


def _packed(document: dict) -> bytes:
    body = {k: v for k, v in document.items() if k != "checksum"}
    if "checksum" in document:
        document = {**body, "checksum": zlib.crc32(msgpack.packb(body, use_bin_type=True))}
    return msgpack.packb(document, use_bin_type=True)


def _document(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    document = msgpack.unpackb(data, raw=False, strict_map_key=False)
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        places = [p for p in paths(document) if p and p[0] != "checksum"]
        keys = [p for p in places if len(p) == 3 and p[0] == "entries" and p[2] == 0]
        if keys and rng.random() < 0.3:  # inside an entry's key (packed on its own)
            path = rng.choice(keys)
            key = msgpack.unpackb(document[path[0]][path[1]][0], raw=False,
                                  strict_map_key=False)
            key, what = mutate(rng, key)
            try:
                document[path[0]][path[1]][0] = msgpack.packb(key, use_bin_type=True)
            except (TypeError, ValueError, OverflowError):
                continue
            done.append(f"entry {path[1]} key: {what}")
            continue
        document, what = mutate(rng, document, places)
        done.append(what)
        if not isinstance(document, dict):
            break
    keep = rng.random() < 0.85 and isinstance(document, dict)
    try:
        data = _packed(document) if keep else msgpack.packb(document, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return mutate_bytes(rng, data)
    return data, "; ".join(done) + ("" if keep else " (checksum not redone)")


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    profiles = work / "profiles"
    shutil.copytree(bases.profiles, profiles)
    which = rng.choice(["cache", "cache", "cache", "calibration"])
    target = profiles / getattr(bases, which).name
    roll = rng.random()
    if roll < 0.08:
        kind = rng.choice(["fifo", "directory", "link-to-zero", "empty", "binary", "huge"])
        target.unlink()
        special(rng, work, kind, target.relative_to(work))
        what = f"the {which} is {kind}"
    elif roll < 0.3:
        data, what = mutate_bytes(rng, target.read_bytes())
        target.write_bytes(data)
        what = f"{which}: {what}"
    else:
        data, what = _document(rng, target.read_bytes())
        target.write_bytes(data)
        what = f"{which}: {what}"
    shown = str(target.relative_to(work))
    command = rng.choice(["show", "show-json", "show-model", "simulate", "search", "detect",
                          "merge", "profile"])
    cost = ["--cost", "profiled", "--profiles", "profiles"]
    argv = {
        "show": ["profile", "--show", shown],
        "show-json": ["profile", "--show", shown, "--json"],
        "show-model": ["profile", "--show", shown, "-m", "lenet"],
        "simulate": ["simulate", "-m", "lenet", "-c", "local-cpu-2", *cost, "--json"],
        "search": ["search", "-m", "lenet", "-c", "local-cpu-2", *cost, "--budget", "20",
                   "--no-log"],
        "detect": ["clusters", "--detect", "--cpu-ranks", "2", "--profiles", "profiles",
                   "--json"],
        "merge": ["profile", "--merge", shown, str(bases.cache), "--profiles", "merged"],
        "profile": ["profile", "-m", "lenet", "--device", "cpu", "--repeats", "1", "--warmup",
                    "0", "--max-devices", "2", "--profiles", "profiles"],
    }[command]
    return Case(CATEGORY, index, f"{what}; {command}", [FLEXTUI, *argv], work,
                json=command in ("show-json", "simulate", "detect"), long=True,
                codes=frozenset({0, 2, 130}))
