"""Scanning the framed records of a search log's bytes back: damage told apart from a
tail cut short.

Damage. A record whose checksum fails is damage, unless the file from a 512-byte boundary
inside that record to its end is all zeros: that is what a machine losing power leaves (the
file's last blocks allocated but never written), and it reads as a tail cut short.
"""

from __future__ import annotations

import binascii
import zlib
from dataclasses import dataclass
from pathlib import Path

from flextui.errors import SearchLogError
from flextui.search.logformat import FRAME, HEAD_CRC_INIT

#: zeros from a multiple of this to the end of the file are a lost tail, not damage
#: (the smallest block a disk writes; pages and filesystem blocks are multiples of it)
SECTOR = 512


# -- reading ----------------------------------------------------------------------------


@dataclass
class Frames:
    """The framed records of a log's bytes, in order, each with its start offset."""

    bodies: list[tuple[int, bytes]]
    end: int            # where the last complete record ends
    truncated: bool     # bytes after ``end`` are a tail cut short (or zeroed), not records


def scan_frames(data: bytes, start: int, path: Path) -> Frames:
    """Check and split the frames of ``data`` from offset ``start``. A frame cut off by
    the end of the data, or damaged only by a zero-filled tail, ends the scan as truncated;
    any other checksum failure raises SearchLogError naming the record and its offset."""
    bodies: list[tuple[int, bytes]] = []
    pos, size = start, len(data)
    written = _nonzero_end(data)
    zeros = min(-(-written // SECTOR) * SECTOR, size)   # where an aligned zero tail starts
    while pos < size:
        if size - pos < FRAME.size:
            return Frames(bodies, pos, True)
        length, body_crc, head_crc = FRAME.unpack_from(data, pos)
        end = pos + FRAME.size + length
        if binascii.crc_hqx(data[pos:pos + 8], HEAD_CRC_INIT) != head_crc:
            if written <= pos or zeros < pos + FRAME.size:
                return Frames(bodies, pos, True)
            raise SearchLogError(f"{path}: record {len(bodies)} at byte {pos} is corrupt (bad "
                                 f"frame checksum); the file is damaged")
        if end > size:
            return Frames(bodies, pos, True)
        body = data[pos + FRAME.size:end]
        if zlib.crc32(body) != body_crc:
            if zeros < end:
                return Frames(bodies, pos, True)
            raise SearchLogError(f"{path}: record {len(bodies)} at byte {pos} is corrupt "
                                 f"(checksum mismatch); the file is damaged")
        bodies.append((pos, body))
        pos = end
    return Frames(bodies, pos, False)


def _nonzero_end(data: bytes) -> int:
    """The offset just after the last non-zero byte of ``data`` (0 if it is all zeros)."""
    end = len(data)
    while end:
        start = max(0, end - 65536)
        kept = len(data[start:end].rstrip(b"\0"))
        end = start + kept
        if kept:
            break
    return end
