"""Mutations of data as files hold it (msgpack or JSON values: maps, lists, strings,
numbers), and of bytes: each returns a changed copy and says what it did."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

#: terminal escapes a name might carry: a window title, the clipboard, a cleared screen
ESCAPES = ["\x1b]0;pwned\x07", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J", "\x9b2J", "\x00", "\r",
           "\n", "\t", "\u202e", "\ud800"]
#: numbers past every limit, at every edge, and not numbers at all
NUMBERS = [0, -1, 1, 2, 3, -(2**31), 2**31, 2**32 + 1, 2**53 + 1, 2**63 - 1, -(2**63),
           2**64 - 1, 10**18, 0.0, -0.0, 0.5, -0.5, 1e-300, 5e-324, 1e308, -1e308,
           math.inf, -math.inf, math.nan, 1e23, 65535, 65536, 1024, 4097]
STRINGS = ["", " ", "x", "x" * 300, "x" * 5000, "é☃", "名前", "../../etc/passwd", "/dev/zero",
           "data-parallel", "nan", "inf", "-1", "1e400", "0x10", "True", "null", "lenet",
           "local-cpu-2", "p100-4x4", "finished", "stopped", "a/b", "-Fevil"]
OTHERS: list[Any] = [None, True, False, [], {}, [[]], {"": None}, b"", b"\x00\xff" * 8,
                     [1, 2, 3], {"x": 1}]


def special(rng: random.Random) -> Any:
    """A value of any type, chosen to break a reader."""
    pick = rng.random()
    if pick < 0.45:
        return rng.choice(NUMBERS)
    if pick < 0.75:
        s = rng.choice(STRINGS)
        if rng.random() < 0.4:
            s = s + rng.choice(ESCAPES)
        return s
    if pick < 0.9:
        return copy.deepcopy(rng.choice(OTHERS))
    return nested(rng.choice([5, 40, 200]))


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in ``value``: a tuple of keys and indexes from the top."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found.extend(paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(paths(v, (*prefix, i)))
    return found


def get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def tweak(rng: random.Random, v: Any) -> Any:
    """``v`` changed in kind: a number nudged, scaled, negated or made absurd; a string
    stretched, cut or given a control character; a list cut or grown; else a special."""
    if isinstance(v, bool):
        return rng.choice([not v, int(v), str(v).lower(), None])
    if isinstance(v, int):
        return rng.choice([v + 1, v - 1, -v, v * 1000, v * 2**40, float(v), str(v),
                           v + 0.5, special(rng)])
    if isinstance(v, float):
        return rng.choice([v * 2, -v, v * 1e300, v / 1e300, math.nan, math.inf, int(v)
                           if math.isfinite(v) else 0, str(v), special(rng)])
    if isinstance(v, str):
        return rng.choice([v + rng.choice(ESCAPES), v * 50, v[: len(v) // 2], "", v.upper(),
                           v + " ", rng.choice(ESCAPES) + v, special(rng)])
    if isinstance(v, list) and v:
        return rng.choice([v[:-1], v + [copy.deepcopy(v[-1])], v[::-1], [], v * 3,
                           special(rng)])
    if isinstance(v, dict) and v:
        key = rng.choice(list(v))
        return rng.choice([{k: x for k, x in v.items() if k != key},
                           {**v, key + "x" if isinstance(key, str) else key + 1: v[key]},
                           list(v.values()), special(rng)])
    return special(rng)


def mutate(rng: random.Random, data: Any, places: list[tuple] | None = None) -> tuple[Any, str]:
    """A copy of ``data`` with one place changed (``places``: where to choose from,
    default anywhere): replaced, tweaked, deleted, or given a sibling; and what was done."""
    data = copy.deepcopy(data)
    candidates = places if places else paths(data)
    path = rng.choice(candidates)
    shown = "/".join(map(str, path))[:80] or "<top>"
    if not path:
        new = tweak(rng, data)
        return new, f"top {_short(new)}"
    parent, key = get(data, path[:-1]), path[-1]
    how = rng.random()
    if how < 0.15:
        if isinstance(parent, dict):
            del parent[key]
        else:
            del parent[key]
        return data, f"deleted {shown}"
    if how < 0.22 and isinstance(parent, dict):
        extra = rng.choice(["extra", "x" + str(key), str(key).upper(), "\x1b[2J"])
        parent[extra] = special(rng)
        return data, f"added key {extra!r} beside {shown}"
    if how < 0.6:
        parent[key] = tweak(rng, parent[key])
    else:
        parent[key] = special(rng)
    return data, f"{shown} = {_short(parent[key])}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def mutate_bytes(rng: random.Random, data: bytes, start: int = 0) -> tuple[bytes, str]:
    """``data`` damaged past byte ``start``: bits flipped, cut, zero-filled, a run of
    bytes repeated or garbage appended."""
    span = max(1, len(data) - start)
    how = rng.choice(["flip", "flip", "cut", "zeros", "repeat", "garbage", "drop"])
    at = start + rng.randrange(span)
    if how == "flip":
        flips = rng.choice([1, 1, 2, 8])
        out = bytearray(data)
        for _ in range(flips):
            at = start + rng.randrange(span)
            out[at] ^= 1 << rng.randrange(8)
        return bytes(out), f"{flips} bit(s) flipped"
    if how == "cut":
        return data[:at], f"cut at byte {at}"
    if how == "zeros":
        return data[:at] + b"\0" * (len(data) - at), f"zero-filled from byte {at}"
    if how == "repeat":
        n = rng.randrange(1, 200)
        return data[:at] + data[at:at + n] * 3 + data[at:], f"{n} bytes at {at} repeated"
    if how == "drop":
        n = rng.randrange(1, 64)
        return data[:at] + data[at + n:], f"{n} bytes at {at} dropped"
    return data + rng.randbytes(rng.randrange(1, 300)), "garbage appended"
