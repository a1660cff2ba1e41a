"""The records of a framed log (``.ffsearch``, ``.ffrun``) as data, and back to bytes
with their checksums redone, so a mutated record gets past the framing and reaches the
reader's checks of its fields."""

from __future__ import annotations

from typing import Any

import msgpack

from flextui.search.logformat import FRAME, frame


def records(data: bytes, magic: bytes) -> list[Any]:
    """The decoded records of a log's bytes (a log written whole by flextui)."""
    out, at = [], len(magic)
    while at < len(data):
        length = FRAME.unpack_from(data, at)[0]
        body = data[at + FRAME.size:at + FRAME.size + length]
        out.append(msgpack.unpackb(body, raw=False, strict_map_key=False))
        at += FRAME.size + length
    return out


def pack(record: Any) -> bytes:
    """One record framed; ValueError/TypeError/OverflowError when msgpack cannot hold it."""
    return frame(msgpack.packb(record, use_bin_type=True))


def log_bytes(magic: bytes, recs: list[Any]) -> bytes:
    return magic + b"".join(pack(r) for r in recs)
