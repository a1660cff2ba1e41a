"""Versioned files: the envelope every flextui file format shares, and reading msgpack
that may be damaged.

A whole-file msgpack document (a profile cache, a communication calibration) is one
map::

    {"format": <format name>, "version": <int>, ...body..., "checksum": <crc32>}

``checksum`` (formats that have one) is the CRC-32 of the map without it, packed the
same way, so damage that still decodes (a flipped bit in a time) is caught. Formats
framed otherwise (a search log's records, a strategy's JSON) share the version rule:
a version is a whole number >= 1, and one newer than this flextui reads is reported as
such (upgrade flextui), never read as damage. Every problem is a :class:`BadDocument`
whose ``problem`` is a phrase the caller puts after the file's path.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import msgpack

from flextui.errors import FlextuiError

__all__ = ["BadDocument", "DocumentFormat", "pack", "unpack"]


class BadDocument(FlextuiError):
    """Bytes that cannot be trusted; ``problem`` says why, in a phrase;
    ``newer_version`` is set when a newer flextui wrote them."""

    def __init__(self, problem: str, newer_version: int | None = None) -> None:
        super().__init__(problem)
        self.problem, self.newer_version = problem, newer_version


def pack(data: Any) -> bytes:
    return msgpack.packb(data, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """msgpack ``data`` decoded (strings as str, maps with any keys); BadDocument for
    bytes that do not decode, however they fail (truncated, garbage, extra bytes)."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 (any decoding failure of untrusted bytes)
        raise BadDocument(_decoding_problem(exc)) from None


def _decoding_problem(exc: Exception) -> str:
    if isinstance(exc, msgpack.ExtraData):
        return "corrupt (unexpected bytes after the data)"
    reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
    return f"corrupt or truncated (msgpack: {reason})"


@dataclass(frozen=True)
class DocumentFormat:
    """One file format: its ``name``, the ``version`` this flextui writes (and the
    newest it reads), whether its documents carry a ``checksum``, and ``what`` it is
    called in messages ("profile cache")."""

    name: str
    version: int
    what: str
    checksum: bool = True

    def check_version(self, version: object) -> int:
        """``version`` if this flextui reads it; else BadDocument (``newer_version`` set
        when it is a version from a newer flextui)."""
        if type(version) is not int or version < 1:
            raise BadDocument(f"invalid (version: {str(version)[:40]!r} is not a format "
                              "version)")
        if version > self.version:
            raise BadDocument(f"written by a newer flextui ({self.what} format version "
                              f"{version}; this flextui reads version {self.version})",
                              newer_version=version)
        return version

    def encode(self, body: dict[str, Any]) -> bytes:
        """The bytes of a document holding ``body`` (a map without the envelope's keys)."""
        document = {"format": self.name, "version": self.version, **body}
        if self.checksum:
            document["checksum"] = zlib.crc32(pack(document))
        return pack(document)

    def decode(self, data: bytes) -> tuple[int, dict[Any, Any]]:
        """(version, body) of a document's bytes, the body without the envelope's keys;
        BadDocument saying what is wrong: empty, not msgpack, another format, a bad or
        newer version, a checksum that does not match."""
        if not data:
            raise BadDocument("the file is empty")
        try:
            document = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except msgpack.ExtraData as exc:  # another format's file may go on after a value
            unpacked = exc.unpacked  # type: ignore[attr-defined]  # msgpack-types lacks it
            raise BadDocument(_decoding_problem(exc) if self._is_ours(unpacked)
                              else f"not a flextui {self.what}") from None
        except Exception as exc:  # noqa: BLE001 (any decoding failure of untrusted bytes)
            raise BadDocument(_decoding_problem(exc)) from None
        if not self._is_ours(document):
            raise BadDocument(f"not a flextui {self.what}")
        version = document.get("version")
        if type(version) is not int or version < 1:
            self.check_version(version)
        if self.checksum:
            body = {k: v for k, v in document.items() if k != "checksum"}
            stored = document.get("checksum")
            if type(stored) is not int or zlib.crc32(pack(body)) != stored:
                raise BadDocument("corrupt (checksum mismatch)")
        self.check_version(version)
        return version, {k: v for k, v in document.items()
                         if k not in ("format", "version", "checksum")}

    def _is_ours(self, document: Any) -> bool:
        return isinstance(document, dict) and document.get("format") == self.name
