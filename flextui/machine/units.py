"""Parse the quantities people write in cluster files: sizes, bandwidths, durations, FLOP/s.

Everything comes back in base units (bytes, bytes/s, seconds, FLOP/s). Plain numbers
(an ``int``/``float``, or a string holding only a number) are already in base units.
Each parser raises :class:`ValueError` whose text says what was wrong and shows an
example of what to write; the TOML loader prefixes it with the file and the field.

- sizes: ``B``, decimal ``KB MB GB TB PB`` (1000^n), binary ``KiB MiB GiB TiB PiB``
  (1024^n). A lowercase ``b`` means bits and is refused for sizes.
- bandwidths: ``GB/s`` (bytes) and ``Gb/s``/``Gbit/s``/``Gbps`` (bits, divided by 8);
  ``GBps`` is bytes; binary prefixes (``GiB/s``) work too.
- durations: ``s``, ``ms``, ``us``/``µs``/``μs``, ``ns``.
- FLOP/s: ``FLOPS`` or ``FLOP/s`` with ``K M G T P E`` prefixes (any case).
"""

from __future__ import annotations

import math
import re

from flextui.limits import integer_problem

__all__ = ["BANDWIDTH", "FLOPS", "LATENCY_MOST", "format_bytes", "parse_bytes",
           "parse_bandwidth", "parse_duration", "parse_flops"]

#: the figures a cluster may give, least and most: beyond them a simulated time
#: overflows to infinity (a latency of 1e308 s) or a transfer takes forever (1e-300 B/s)
BANDWIDTH = (1.0, 1e18)       # bytes/s: 1 B/s to 1 EB/s
FLOPS = (1.0, 1e21)           # FLOP/s: to 1 ZFLOP/s
LATENCY_MOST = 3600.0         # seconds

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>\S*?)\s*$")

_DECIMAL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50, "ei": 2**60}


def _split(value: object, what: str, example: str) -> tuple[float, str]:
    """(number, unit) from a number or a string; numbers have an empty unit."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r:.60} is not {what}; write e.g. {example}")
    if isinstance(value, int) and integer_problem(value):
        raise ValueError(f"{integer_problem(value)}; write e.g. {example}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    elif isinstance(value, str):
        m = _QUANTITY.match(value) if len(value) <= 100 else None
        if not m:
            raise ValueError(f"{value!r:.60} is not {what}; write e.g. {example}")
        number, unit = float(m["num"]), m["unit"]
    else:
        raise ValueError(f"{value!r:.60} (a {type(value).__name__}) is not {what}; "
                         f"write e.g. {example}")
    if not math.isfinite(number):
        raise ValueError(f"{value!r:.60} is not {what}: it must be a finite number; "
                         f"write e.g. {example}")
    if number < 0:
        raise ValueError(f"{value!r:.60} is not {what}: it must not be negative; "
                         f"write e.g. {example}")
    return number, unit


def _within(value: object, result: float, what: str, most: float, unit: str, example: str,
            least: float = 0.0) -> float:
    """``result`` when it is 0 or from ``least`` to ``most``: a figure beyond them (a
    latency of 1e308 s) would make a simulated time overflow to infinity."""
    if result and not least <= result <= most:
        raise ValueError(f"{value!r:.60} is out of range for {what}: flextui takes "
                         f"{least:g} to {most:g} {unit}; write e.g. {example}")
    return result


def _prefix(prefix: str) -> float | None:
    p = prefix.lower()
    return _DECIMAL.get(p, _BINARY.get(p))


_BYTES_EXAMPLE = '"16GiB", "16 GB" or 17179869184'


def parse_bytes(value: object) -> int:
    """A size in bytes: ``"16GiB"``, ``"16 GB"``, ``"512 MiB"``, ``17179869184``."""
    number, unit = _split(value, "a size in bytes", _BYTES_EXAMPLE)
    if unit == "":
        return _whole_bytes(value, number)
    if unit.endswith("b") or unit.lower().endswith("bit") or unit.lower().endswith("bits"):
        raise ValueError(f"{value!r:.60} is in bits, but sizes are in bytes; "
                         f"write a capital B, e.g. {_BYTES_EXAMPLE}")
    if unit.endswith("/s"):
        raise ValueError(f"{value!r:.60} is a bandwidth, not a size; write e.g. {_BYTES_EXAMPLE}")
    if unit.endswith("B"):
        scale = _prefix(unit[:-1])
        if scale is not None:
            return _whole_bytes(value, number * scale)
    raise ValueError(f"{value!r:.60} is not a size in bytes (unknown unit {unit!r}); "
                     f"write e.g. {_BYTES_EXAMPLE}")


def _whole_bytes(value: object, nbytes: float) -> int:
    if not math.isfinite(nbytes):
        raise ValueError(f"{value!r:.60} is too large a size; write e.g. {_BYTES_EXAMPLE}")
    return round(nbytes)


_BANDWIDTH_EXAMPLE = '"25 GB/s" or "100 Gb/s"'
_BANDWIDTH_RANGE = (BANDWIDTH[1], "bytes/s", _BANDWIDTH_EXAMPLE, BANDWIDTH[0])
_BANDWIDTH_UNIT = re.compile(r"^(?P<prefix>[A-Za-z]i?)??"
                             r"(?P<unit>B|b|bit|bits|Byte|Bytes|byte|bytes)(?P<per>/s|ps)$")


def parse_bandwidth(value: object) -> float:
    """A bandwidth in bytes/s: ``"25GB/s"``, ``"100Gb/s"`` (bits: /8), ``"12.5 GB/s"``, ``25e9``."""
    number, unit = _split(value, "a bandwidth", _BANDWIDTH_EXAMPLE)
    if unit == "":
        return _within(value, number, "a bandwidth", *_BANDWIDTH_RANGE)
    m = _BANDWIDTH_UNIT.match(unit)
    if m:
        scale = _prefix(m["prefix"] or "")
        if scale is not None:
            bits = m["unit"] == "b" or m["unit"].startswith("bit")
            return _within(value, number * scale / (8 if bits else 1), "a bandwidth",
                           *_BANDWIDTH_RANGE)
    hint = ""
    if not unit.endswith("/s") and not unit.endswith("ps"):
        hint = " (a bandwidth needs a per-second unit)"
    raise ValueError(f"{value!r:.60} is not a bandwidth{hint}; write e.g. {_BANDWIDTH_EXAMPLE}")


_DURATION_EXAMPLE = '"2us", "1.5 µs", "0.3ms" or 1e-6 (seconds)'
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
                   "ns": 1e-9}


def parse_duration(value: object) -> float:
    """A duration in seconds: ``"2us"``, ``"1.5 µs"``, ``"0.3ms"``, ``"1e-6"``, ``2e-6``."""
    number, unit = _split(value, "a duration", _DURATION_EXAMPLE)
    scale = _DURATION_UNITS.get(unit)
    if scale is None:
        raise ValueError(f"{value!r:.60} is not a duration (unknown unit {unit!r}); "
                         f"write e.g. {_DURATION_EXAMPLE}")
    return _within(value, number * scale, "a duration", LATENCY_MOST, "s (an hour)",
                   _DURATION_EXAMPLE)


_FLOPS_EXAMPLE = '"10.6 TFLOPS", "312 TFLOP/s" or 9.3e12'
_FLOPS_RANGE = (FLOPS[1], "FLOP/s", _FLOPS_EXAMPLE, FLOPS[0])
_FLOPS_UNIT = re.compile(r"^(?P<prefix>[A-Za-z])?(?:flops|flop/s)$", re.IGNORECASE)


def parse_flops(value: object) -> float:
    """A compute rate in FLOP/s: ``"10.6 TFLOPS"``, ``"9.3e12"``, ``9.3e12``."""
    number, unit = _split(value, "a FLOP/s rate", _FLOPS_EXAMPLE)
    if unit == "":
        return _within(value, number, "a FLOP/s rate", *_FLOPS_RANGE)
    m = _FLOPS_UNIT.match(unit)
    if m:
        scale = _DECIMAL.get((m["prefix"] or "").lower())
        if scale is not None:
            return _within(value, number * scale, "a FLOP/s rate", *_FLOPS_RANGE)
    raise ValueError(f"{value!r:.60} is not a FLOP/s rate (unknown unit {unit!r}); "
                     f"write e.g. {_FLOPS_EXAMPLE}")


def format_bytes(nbytes: float) -> str:
    """A size for people, in binary units: ``"12.0 GiB"``, ``"800.0 MiB"``, ``"512 B"``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"
