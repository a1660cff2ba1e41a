"""The limits on what flextui reads, one definition each (the table of docs/limits.md).

Cluster files, strategy files and search logs come from people and from other machines;
a few numbers in them decide how much work and memory reading them takes (a node count
of 10**30, a name of 10 MB, a zlib bomb). Each such number has a limit here, checked
where the value enters and before any work is done, so input over a limit ends in one
message naming the file and the field, the limit and what to do, never in a hang.

A :class:`Limit` says what is counted and how to stay within it; ``problem(found)`` is
the phrase an error message ends with. The readers of each format add the file and the
field: ``flextui.machine.fields`` for cluster files, ``flextui.strategy.file`` for
strategies, ``flextui.search.logformat`` and the cost models' identities for logs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flextui.errors import FlextuiError

__all__ = ["CHAINS", "CLUSTER_FILE_BYTES", "DECOMPRESSED_BYTES", "DEVICES", "DIM_SIZE",
           "FILE_BYTES", "FILE_NAME_BYTES", "HOSTS", "LIMITS", "LINKS", "MAX_INTEGER",
           "NAME_CHARS", "NESTING", "RANKS_PER_HOST", "TEXT_CHARS", "Limit", "LimitError",
           "decompress", "integer_problem", "nesting_problem", "parsing", "path_problem",
           "read_file", "read_json"]


class LimitError(FlextuiError):
    """Input over one of flextui's documented limits, or a "file" that is not one (a
    FIFO, a device such as /dev/zero) and so has no size to check."""


@dataclass(frozen=True)
class Limit:
    """At most ``value`` ``unit`` ``scope``; ``fix`` says how to stay within it."""

    value: int
    unit: str
    scope: str
    fix: str

    def problem(self, found: int) -> str | None:
        """None when ``found`` is within the limit, else what is wrong and what to do."""
        if found <= self.value:
            return None
        return (f"{_shown(found)} {self.unit} {self.scope} is over flextui's limit of "
                f"{self.value:,}; {self.fix}")


#: a cluster at this size loads in about 4 s and 0.5 GB (8,192 nodes x 8 GPUs)
DEVICES = Limit(65_536, "devices", "in one cluster",
                "describe fewer nodes or GPUs per node (a search over a part of a "
                "cluster simulates only that part)")
#: directed links: each duplex link counts twice; 8,192 nodes of 8 all-to-all GPUs have 589,824
LINKS = Limit(1_048_576, "directed links", "in one cluster",
              'join the GPUs of a node through a switch (topology = "switch") instead of '
              "all-to-all, or describe fewer nodes")
NAME_CHARS = Limit(256, "characters", "in a name", "use a shorter name")
TEXT_CHARS = Limit(4_096, "characters", "in a description or path", "shorten it")
NESTING = Limit(32, "levels of nesting", "in one value",
                "no flextui file nests lists and tables that deep; the file is damaged or "
                "not a flextui file")
#: a dim's degrees are its divisors, found in sqrt(size) steps (a millisecond at this size)
DIM_SIZE = Limit(2**40, "elements", "along one tensor dim",
                 "the model or the file describing it is wrong")
CHAINS = Limit(256, "chains", "in one search",
               "each chain is a worker process of its own; run fewer")
#: a launch holds an ssh session open to each host while it runs
HOSTS = Limit(4_096, "hosts", "in one launch", "launch over fewer hosts")
#: ranks one host (or this machine) runs: one process each
RANKS_PER_HOST = Limit(1_024, "ranks", "on one host",
                       "run fewer ranks on each host, or spread them over more hosts")
#: the longest file name (one part of a path) file systems take, in bytes
FILE_NAME_BYTES = 255
#: the largest integer flextui reads (what a search log, msgpack, can store)
MAX_INTEGER = 2**63 - 1
DECOMPRESSED_BYTES = Limit(64 * 2**20, "bytes", "of decompressed data in one field",
                           "the file is damaged or not made by flextui")

#: TOML is parsed in Python at about 2 MB/s: this reads in a few seconds (about 80,000
#: listed links; a regular layout describes any cluster in a few lines)
CLUSTER_FILE_BYTES = Limit(8 * 2**20, "bytes", "in a cluster file",
                           "describe a large cluster with a regular layout ([nodes]) "
                           "instead of listing every device and link")
#: a strategy file lists every op's devices: 10,000 ops over 1,024 devices fit
FILE_BYTES = Limit(256 * 2**20, "bytes", "in a strategy or host file",
                   "the file is damaged or not the file meant")

#: every limit's value, by the name the table of docs/limits.md gives it
LIMITS = {"devices per cluster": DEVICES.value, "directed links per cluster": LINKS.value,
          "characters in a name": NAME_CHARS.value,
          "characters in a description or path": TEXT_CHARS.value,
          "elements along a tensor dim": DIM_SIZE.value, "chains per search": CHAINS.value,
          "hosts per launch": HOSTS.value, "ranks per host": RANKS_PER_HOST.value,
          "nesting depth": NESTING.value, "integer magnitude": MAX_INTEGER,
          "decompressed bytes per field": DECOMPRESSED_BYTES.value,
          "bytes in a cluster file": CLUSTER_FILE_BYTES.value,
          "bytes in a strategy or host file": FILE_BYTES.value}


def _shown(value: int) -> str:
    """``value`` with thousands separators, or its digit count when it is huge (about
    that count past what Python turns into text)."""
    bits = abs(value).bit_length()
    if bits >= 14_000:
        return f"an integer of about {math.floor(bits * math.log10(2)) + 1:,} digits"
    digits = len(str(abs(value)))
    return f"{value:,}" if digits <= 30 else f"a {digits:,}-digit integer"


def integer_problem(value: int) -> str | None:
    """None when ``value`` fits flextui's integers (64-bit signed), else what is wrong;
    a huge value is described by its digit count, never printed in full."""
    if abs(value) <= MAX_INTEGER:
        return None
    return (f"{_shown(value)} is larger than flextui's limit of {MAX_INTEGER:,} (what a "
            "search log can store)")


def path_problem(text: str) -> str | None:
    """None when ``text`` can name a file (at most TEXT_CHARS.value characters, no part
    longer than FILE_NAME_BYTES), else what is wrong; the text itself is never shown."""
    if len(text) > TEXT_CHARS.value:
        return (f"is {_shown(len(text))} characters long, over flextui's limit of "
                f"{TEXT_CHARS.value:,} for a name or path; {TEXT_CHARS.fix}")
    longest = max(len(part.encode(errors="surrogateescape")) for part in text.split("/"))
    if longest > FILE_NAME_BYTES:
        return (f"has a part of {longest:,} bytes, longer than a file name may be "
                f"({FILE_NAME_BYTES} bytes); {TEXT_CHARS.fix}")
    return None


#: one wording whichever finds it: the walk below, or a parser's RecursionError (how deep
#: a parser goes before one depends on the Python: 3.12's json parses 5,000 levels)
NESTED_TOO_DEEP = (f"nested deeper than flextui's limit of {NESTING.value} levels; "
                   f"{NESTING.fix}")


def nesting_problem(data: Any) -> str | None:
    """None when lists and maps in ``data`` nest at most NESTING.value deep (walked
    without recursion), else what is wrong."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > NESTING.value:
            return NESTED_TOO_DEEP
        stack.extend((child, depth + 1) for child in children)
    return None


@contextlib.contextmanager
def parsing(where: str) -> Iterator[None]:
    """Turn what a parser raises for input past the limits into a LimitError naming
    ``where``: a RecursionError (nesting thousands deep) and Python's ValueError for an
    integer of thousands of digits. The caller catches its parser's syntax errors
    itself, inside this block."""
    try:
        yield
    except RecursionError:
        raise LimitError(f"{where}: {NESTED_TOO_DEEP}") from None
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
        raise LimitError(f"{where}: holds an integer of thousands of digits, larger than "
                         f"flextui's limit of {MAX_INTEGER:,}") from None


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > len(str(MAX_INTEGER)):
        value = int(text[:40])  # enough to say how big it is, without converting it all
        raise LimitError(f"{value:,}... ({len(text):,} digits) is larger than flextui's "
                         f"limit of {MAX_INTEGER:,}")
    value = int(text)
    problem = integer_problem(value)
    if problem is not None:
        raise LimitError(problem)
    return value


def read_json(text: str, where: str) -> Any:
    """JSON ``text`` parsed within the limits (integers, nesting); a LimitError names
    ``where``; json.JSONDecodeError passes through for the caller to word."""
    with parsing(where):
        try:
            data = json.loads(text, parse_int=_bounded_int)
        except LimitError as exc:
            raise LimitError(f"{where}: {exc}") from None
    problem = nesting_problem(data)
    if problem is not None:
        raise LimitError(f"{where}: {problem}")
    return data


def decompress(data: bytes, where: str) -> bytes:
    """zlib ``data`` inflated, refusing (LimitError) to produce more than
    DECOMPRESSED_BYTES.value bytes; zlib.error for bytes that are not zlib data."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, DECOMPRESSED_BYTES.value + 1)
    if len(out) > DECOMPRESSED_BYTES.value or inflater.unconsumed_tail:
        raise LimitError(f"{where}: inflates to more than {DECOMPRESSED_BYTES.value:,} bytes, "
                         f"flextui's limit; {DECOMPRESSED_BYTES.fix}")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return out


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (a named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def read_file(path: str | os.PathLike[str], limit: Limit | None) -> bytes:
    """The bytes of the regular file at ``path`` (a link is followed), at most
    ``limit.value`` of them (None: any number). What is not a regular file (a FIFO,
    which would wait for a writer forever, /dev/zero, which never ends, a directory) or
    is over the limit is refused (LimitError naming ``path``) before it is read;
    OSError (FileNotFoundError...) passes through for the caller to word."""
    shown = os.fsdecode(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((what for test, what in _KINDS if test(info.st_mode)),
                        "an unknown kind of file")
            raise LimitError(f"{shown}: {kind}, not a regular file; give the path of a file")
        if limit is not None and limit.problem(info.st_size) is not None:
            raise LimitError(f"{shown}: {limit.problem(info.st_size)}")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):   # the size it has now, or as it grows
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and limit.problem(size) is not None:
                raise LimitError(f"{shown}: {limit.problem(os.fstat(fd).st_size)}")
    finally:
        os.close(fd)
    return b"".join(chunks)
