"""TOML text of a value as ``tomllib`` reads it (tables, arrays of tables, strings with
control characters escaped, nan and inf), enough to write back a mutated cluster file.
What TOML cannot hold (None, bytes) is left out."""

from __future__ import annotations

import math
import re
from typing import Any

BARE = re.compile(r"[A-Za-z0-9_-]+")


def key(k: Any) -> str:
    k = str(k)
    return k if BARE.fullmatch(k) else string(k)


def string(s: str) -> str:
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or 0xd800 <= ord(c) < 0xe000:
            out.append(f"\\u{ord(c):04x}" if not 0xd800 <= ord(c) < 0xe000 else "?")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def value(v: Any) -> str | None:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return string(v)
    if isinstance(v, list):
        items = [value(x) for x in v]
        return "[" + ", ".join(x for x in items if x is not None) + "]"
    if isinstance(v, dict):
        items = [(key(k), value(x)) for k, x in v.items()]
        return "{" + ", ".join(f"{k} = {x}" for k, x in items if x is not None) + "}"
    return None


def dumps(data: dict, prefix: str = "") -> str:
    """``data`` as a TOML document: plain values first, then tables and arrays of tables."""
    lines = []
    tables = []
    for k, v in data.items():
        if isinstance(v, dict) and v:
            tables.append(("table", k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append(("array", k, v))
        else:
            text = value(v)
            if text is not None:
                lines.append(f"{key(k)} = {text}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for kind, k, v in tables:
        name = f"{prefix}.{key(k)}" if prefix else key(k)
        if kind == "table":
            out += f"\n[{name}]\n" + dumps(v, name)
        else:
            for item in v:
                out += f"\n[[{name}]]\n" + dumps(item, name)
    return out
