"""Node requests: bytes on the stdin of ``python -m flextui.runtime.node`` (the program
a launch over hosts starts on each host through ssh): nothing, noise, a length with
too little after it, a length past the limit, an envelope of another format, and real
preflight and run requests changed field by field with the envelope's checksum redone
(a run request's plan is noise or a real plan's bytes cut; it runs at most two ranks,
and stdin closes at once or after a moment, which ends the run)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import msgpack

from fuzz.bases import Bases
from fuzz.caches import _packed
from fuzz.oracle import PYTHON, Case
from fuzz.values import mutate, paths

CATEGORY = "node"


def _preflight(rng: random.Random) -> dict:
    return {"action": "preflight", "first": rng.choice(["localhost", "127.0.0.1", "h1"]),
            "port": rng.choice([None, 29500, 0]), "modules": rng.choice([[], ["torchvision"],
                                                                         ["json"]])}


def _run(rng: random.Random, bases: Bases) -> dict:
    return {"action": "run", "plan": rng.choice([b"", b"\x00" * 64, rng.randbytes(200),
                                                 bases.search_log.read_bytes()[:500]]),
            "nnodes": 1, "node_rank": 0, "ranks": 1, "master": "127.0.0.1",
            "port": rng.choice([29500 + rng.randrange(1000), 0]), "run_id": "fuzz"}


def _framed(document: dict, checksum: bool = True) -> bytes:
    data = _packed({**document, "checksum": 0}) if checksum else \
        msgpack.packb(document, use_bin_type=True)
    return struct.pack(">I", len(data)) + data


def _within_limits(body: dict) -> bool:
    """A run request this machine can take: at most two ranks (a real request for 1,024
    ranks on a two-core machine starts 1,024 processes, as asked)."""
    ranks = body.get("ranks")
    return body.get("action") != "run" or not isinstance(ranks, int) or ranks <= 2


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    roll = rng.random()
    if roll < 0.1:
        data, what = rng.choice([b"", b"\n", rng.randbytes(rng.randrange(1, 64))]), "noise"
    elif roll < 0.2:
        n = rng.choice([0, 1, 5, 2**20, 2**30, 2**30 + 1, 2**32 - 1])
        data = struct.pack(">I", n) + rng.randbytes(rng.randrange(0, 32))
        what = f"a length of {n} and {len(data) - 4} bytes"
    elif roll < 0.25:
        data = _framed({"format": "flextui-profiles", "version": 1})
        what = "another format's envelope"
    else:
        run = rng.random() < 0.35
        body = _run(rng, bases) if run else _preflight(rng)
        document = {"format": "flextui-node", "version": 2, **body}
        done = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            for _ in range(20):
                changed, what = mutate(rng, document, [p for p in paths(document) if p])
                if isinstance(changed, dict) and _within_limits(changed):
                    document = changed
                    done.append(what)
                    break
        try:
            data = _framed(document, checksum=rng.random() < 0.95)
        except (TypeError, ValueError, OverflowError):
            data = _framed({"format": "flextui-node", "version": 2, **body})
        what = f"{'run' if run else 'preflight'}: {'; '.join(done) or 'as sent'}"
        if rng.random() < 0.1:
            data = data[:rng.randrange(len(data))]
            what += " (cut)"
    close = rng.choice([0.0, 0.0, 0.5, 3.0])
    return Case(CATEGORY, index, what, [PYTHON, "-m", "flextui.runtime.node"], work,
                stdin=data, stdin_close_s=close, codes=frozenset({0, 1, 2}))
