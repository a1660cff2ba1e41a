"""The operator profile cache: measured task times and optimizer updates, one msgpack
file per device kind.

A file ``<dir>/<device-kind>.msgpack`` is one msgpack map::

    {"format": "flextui-profiles", "version": 3, "device": <device name>,
     "device_kind": <slug of the name>, "entries": [[key-bytes, entry-map], ...],
     "updates": [[update-key-map, update-map], ...],
     "checksum": crc32 of the map without "checksum", packed the same way}

The checksum catches damage that still decodes (a flipped bit in a time); every later
format version keeps it. A key is stored as its canonical encoding (``ProfileKey.encoded``,
a msgpack map in bytes), so a lookup compares bytes and opening a cache decodes no
keys: a stored key that equals a lookup's encoding is valid by construction, and keys are
decoded, and validated, only where they are read as keys (``CacheFile.items``: showing a
cache). That keeps a warm profiling run cheap (``benchmarks/profile_speed.py``). The
updates (a few dozen) are decoded and validated as the file is read. A version 1 file,
whose updates were entries of a made-up op type, reads as its tasks and updates
(``cache_v1``), and a version 2 file, whose update keys named no optimizer, as SGD's
updates (the only ones it timed); both are written as version 3 when saved.
Everything read is validated; nothing is unpickled. A file that is corrupt, truncated
or foreign (not a profile cache, or another device kind's) is never trusted: the cache
reports it in ``notices``, moves it aside (renamed to ``<name>.corrupt-<timestamp>``,
never deleted) when it is the user's own file, ignores it when it is a read-only
reference file, and starts without it. A file from a newer
format version is reported and left untouched; ``save`` refuses to replace it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from flextui.cost.cache_dirs import reference_profile_dir, user_profile_dir
from flextui.cost.cache_records import (
    FIELDS,
    ProfileEntry,
    ProfileKey,
    UpdateEntry,
    UpdateKey,
    check_pair,
    device_kind_slug,
)
from flextui.cost.cache_v1 import split_updates
from flextui.cost.files import atomic_write, file_lock
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.limits import LimitError, read_file

__all__ = ["PROFILES", "BadDocument", "CacheFile", "ProfileCache", "ProfileEntry",
           "ProfileKey", "Records", "UpdateEntry", "UpdateKey", "decode_cache",
           "device_kind_slug", "encode_cache", "merge_cache_files"]

PROFILES = DocumentFormat("flextui-profiles", 3, "profile cache")
_BODY_FIELDS = {1: ("device", "device_kind", "entries"),
                2: ("device", "device_kind", "entries", "updates"),
                3: ("device", "device_kind", "entries", "updates")}


# ---- the file ----------------------------------------------------------------------

Entries = dict[bytes, ProfileEntry]   # ProfileKey.encoded -> its entry
Updates = dict[UpdateKey, UpdateEntry]
MAX_KEY_BYTES = 1 << 16
_K = TypeVar("_K")
_R = TypeVar("_R", ProfileEntry, UpdateEntry)


def _merge_into(dst: dict[_K, _R], src: dict[_K, _R]) -> None:
    """Add ``src`` to ``dst``; where both have a key, the newer measurement wins."""
    for code, entry in src.items():
        old = dst.get(code)
        if old is None or entry.measured_at > old.measured_at:
            dst[code] = entry


@dataclass
class Records:
    """What a cache file holds: task times, and optimizer updates."""

    entries: Entries = field(default_factory=dict)
    updates: Updates = field(default_factory=dict)

    def merge(self, other: Records) -> None:
        """Add ``other``'s; where both have a key, the newer measurement wins."""
        _merge_into(self.entries, other.entries)
        _merge_into(self.updates, other.updates)


@dataclass(kw_only=True)
class CacheFile(Records):
    device_name: str
    device_kind: str

    def items(self) -> list[tuple[ProfileKey, ProfileEntry]]:
        """Every entry with its key, decoded and validated; BadDocument if a key is
        not a valid key of this device kind."""
        found = []
        for i, (code, entry) in enumerate(self.entries.items()):
            try:
                key = ProfileKey.from_encoded(code)
                if key.device_kind != self.device_kind:
                    raise ValueError(f"device {key.device_name!r} is not of kind "
                                     f"{self.device_kind!r}")
                check_pair(key, entry)
            except (TypeError, ValueError) as exc:
                raise BadDocument(f"invalid (key {i}: {exc})") from None
            found.append((key, entry))
        return found


def encode_cache(device_name: str, entries: Entries, updates: Updates | None = None) -> bytes:
    """The bytes of a cache file (records sorted by key, so equal caches are equal files)."""
    return PROFILES.encode({
        "device": device_name, "device_kind": device_kind_slug(device_name),
        "entries": [[code, entry.to_map()] for code, entry in sorted(entries.items())],
        "updates": [[key.to_map(), update.to_map()]
                    for key, update in sorted((updates or {}).items())]})


def decode_cache(data: bytes, device_kind: str | None = None) -> CacheFile:
    """Parse and validate a cache file's bytes (version 1, 2 or 3), expecting
    ``device_kind`` if given; raise BadDocument saying what is wrong."""
    version, body = PROFILES.decode(data)
    try:
        return _decode_body(body, device_kind, version)
    except (TypeError, ValueError) as exc:
        raise BadDocument(f"invalid ({exc})") from None


def _decode_body(body: dict[str, Any], device_kind: str | None, version: int) -> CacheFile:
    FIELDS.exact_keys(body, _BODY_FIELDS[version], "file")
    device = FIELDS.string(body["device"], "device")
    kind = FIELDS.string(body["device_kind"], "device_kind")
    if kind != device_kind_slug(device):
        raise ValueError(f"device_kind: {kind!r} is not the kind of device {device!r}")
    if device_kind is not None and kind != device_kind:
        raise BadDocument(f"holds profiles for device kind {kind!r}, not {device_kind!r}")
    entries: Entries = {}
    for i, item in enumerate(FIELDS.items(body["entries"], "entries")):
        try:
            code, entry = FIELDS.items(item, "a [key, entry] pair", 2)
            entry = ProfileEntry.from_map(entry)
            if not isinstance(code, bytes) or not 0 < len(code) <= MAX_KEY_BYTES:
                raise ValueError("the key is not an encoded profile key")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"entry {i}: {exc}") from None
        _merge_into(entries, {code: entry})
    if version == 1:
        entries, updates = split_updates(entries)
    else:
        updates = _decode_updates(body["updates"], kind, before_optimizers=version == 2)
    return CacheFile(entries, updates, device_name=device, device_kind=kind)


def _decode_updates(items: Any, device_kind: str, before_optimizers: bool) -> Updates:
    updates: Updates = {}
    for i, item in enumerate(FIELDS.items(items, "updates")):
        try:
            key, update = FIELDS.items(item, "a [key, update] pair", 2)
            key = UpdateKey.from_map(key, before_optimizers=before_optimizers)
            update = UpdateEntry.from_map(update)
            if key.device_kind != device_kind:
                raise ValueError(f"device {key.device_name!r} is not of kind {device_kind!r}")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"update {i}: {exc}") from None
        _merge_into(updates, {key: update})
    return updates


def _fits(key: ProfileKey, entry: ProfileEntry) -> bool:
    """Whether a stored entry is one ``key`` can have (times for its mode)."""
    try:
        check_pair(key, entry)
    except ValueError:
        return False
    return True


def _move_aside(path: Path) -> Path:
    """Rename a bad file to ``<name>.corrupt-<timestamp>`` (callers hold its lock)."""
    stem = f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    aside, n = path.with_name(stem), 1
    while aside.exists():
        aside, n = path.with_name(f"{stem}-{n}"), n + 1
    os.rename(path, aside)
    return aside


# ---- the cache ---------------------------------------------------------------------

class ProfileCache:
    """Profiles of one device kind, read from ``dirs``: the user's writable directory
    first, then read-only reference directories. Lookups prefer the user's entries.

    ``put`` (a task's times) and ``put_update`` (an optimizer update's) record in
    memory; ``save`` merges them into the user's file under its lock
    (newer ``measured_at`` wins per key), so concurrent savers lose nothing. Problems
    with the files are collected in ``notices`` (one line each) for the CLI or app.
    """

    def __init__(self, device_name: str, dirs: Sequence[str | os.PathLike]) -> None:
        if not dirs:
            raise ValueError("ProfileCache needs at least the user's profile directory")
        self.device_name = device_name
        self.device_kind = device_kind_slug(device_name)
        name = f"{self.device_kind}.msgpack"
        self.path = Path(dirs[0]) / name
        self.reference_paths = [Path(d) / name for d in dirs[1:]
                                if os.path.realpath(Path(d) / name) != os.path.realpath(self.path)]
        self.notices: list[str] = []
        self.hits = self.misses = 0
        self._refusal: str | None = None   # why save must not replace the user's file
        self._dirty = False
        self._references = [self._read_reference(p) for p in self.reference_paths]
        self._user = Records()
        if self.path.exists():
            try:
                with file_lock(self.path):
                    self._user = self._read_user_locked()
            except OSError as exc:
                self._notice(f"{self.path}: cannot be read ({exc.strerror or exc}); "
                             "profiles measured now will not be saved to it")

    @classmethod
    def open_default(cls, device_name: str,
                     profiles: str | os.PathLike | None = None) -> ProfileCache:
        """The cache of ``device_name`` in the user's directory (``--profiles DIR`` if
        given) backed by the reference profiles shipped with flextui."""
        return cls(device_name, [user_profile_dir(profiles), reference_profile_dir()])

    def check_writable(self) -> None:
        """Raise FlextuiError now if ``save`` would refuse the user's file (it is from a
        newer flextui, or bad and could not be moved aside): before measuring, not after."""
        if self._refusal:
            raise FlextuiError(self._refusal)

    def get(self, key: ProfileKey) -> ProfileEntry | None:
        for records in (self._user, *self._references):
            found = records.entries.get(key.encoded)
            if found is not None and _fits(key, found):
                self.hits += 1
                return found
        self.misses += 1
        return None

    def put(self, key: ProfileKey, entry: ProfileEntry) -> None:
        if key.device_kind != self.device_kind:
            raise ValueError(f"a profile of {key.device_name!r} does not belong in the "
                             f"{self.device_kind!r} cache")
        check_pair(key, entry)
        self._user.entries[key.encoded] = entry
        self._dirty = True

    def get_update(self, key: UpdateKey) -> UpdateEntry | None:
        for records in (self._user, *self._references):
            found = records.updates.get(key)
            if found is not None:
                return found
        return None

    def put_update(self, key: UpdateKey, update: UpdateEntry) -> None:
        if key.device_kind != self.device_kind:
            raise ValueError(f"an update timed on {key.device_name!r} does not belong in "
                             f"the {self.device_kind!r} cache")
        self._user.updates[key] = update
        self._dirty = True

    def save(self) -> int:
        """Merge what was put into the user's file; return its number of task entries.

        Raises FlextuiError when the file cannot be written or must not be replaced
        (it is from a newer flextui, or could not be read or moved aside)."""
        if not self._dirty:
            return len(self._user.entries)
        try:
            with file_lock(self.path):
                self._refusal = None
                merged = self._read_user_locked()
                if self._refusal:
                    raise FlextuiError(self._refusal)
                merged.merge(self._user)
                atomic_write(self.path, encode_cache(self.device_name, merged.entries,
                                                     merged.updates))
        except OSError as exc:
            raise FlextuiError(f"{self.path}: cannot save profiles ({exc.strerror or exc}); "
                               "make the directory writable or choose another with "
                               "--profiles DIR") from None
        self._user, self._dirty = merged, False
        return len(merged.entries)

    def _notice(self, message: str) -> None:
        if message not in self.notices:
            self.notices.append(message)

    def _read_reference(self, path: Path) -> Records:
        try:
            return decode_cache(read_file(path, None), self.device_kind)
        except FileNotFoundError:
            return Records()
        except OSError as exc:
            self._notice(f"{path}: cannot be read ({exc.strerror or exc}); ignored")
        except LimitError as exc:   # not a file (a FIFO, a device)
            self._notice(f"{exc}; ignored")
        except BadDocument as bad:
            upgrade = "; upgrade flextui to use it" if bad.newer_version else ""
            self._notice(f"{path}: {bad.problem}{upgrade}; ignored (a read-only reference file)")
        return Records()

    def _read_user_locked(self) -> Records:
        """The user's file's records (empty when missing or bad: a bad file is moved
        aside, a newer one makes ``save`` refuse). The caller holds the file's lock."""
        try:
            return decode_cache(read_file(self.path, None), self.device_kind)
        except FileNotFoundError:
            return Records()
        except BadDocument as bad:
            if bad.newer_version:
                self._notice(f"{self.path}: {bad.problem}; upgrade flextui to use it; left "
                             "untouched, and profiles measured now will not be saved to it")
                self._refusal = (f"{self.path}: written by a newer flextui (format version "
                                 f"{bad.newer_version}), so this one must not replace it; "
                                 "upgrade flextui, or profile into another directory with "
                                 "--profiles DIR")
                return Records()
            try:
                aside = _move_aside(self.path)
            except OSError as exc:
                self._notice(f"{self.path}: {bad.problem}; could not be moved aside "
                             f"({exc.strerror or exc}); left as is")
                self._refusal = (f"{self.path}: a bad file that could not be moved aside, "
                                 "so profiles cannot be saved over it; move or remove it by "
                                 "hand")
                return Records()
            self._notice(f"{self.path}: {bad.problem}; moved aside to {aside}; it will be rebuilt")
            return Records()


# ---- merging files from two machines ------------------------------------------------

def _read_strict(path: Path, device_kind: str | None = None) -> CacheFile:
    try:
        return decode_cache(read_file(path, None), device_kind)
    except OSError as exc:
        raise FlextuiError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except BadDocument as bad:
        upgrade = "; upgrade flextui to read it" if bad.newer_version else ""
        raise FlextuiError(f"{path}: {bad.problem}{upgrade}") from None


def merge_cache_files(a: str | os.PathLike, b: str | os.PathLike, out: str | os.PathLike) -> int:
    """Merge two profile caches of one device kind (say, from two machines) into ``out``
    (newer measurement wins per key) and return its number of task entries. An existing
    ``out`` of the same kind is merged in too, never clobbered. Raises FlextuiError if
    a file is unreadable or bad, or the files are for different device kinds."""
    a, b, out = Path(a), Path(b), Path(out)
    first, second = _read_strict(a), _read_strict(b)
    if first.device_kind != second.device_kind:
        raise FlextuiError(f"cannot merge {a} and {b}: they hold profiles for different "
                           f"device kinds ({first.device_kind!r} and {second.device_kind!r})")
    merged = Records()
    merged.merge(first)
    merged.merge(second)
    try:
        with file_lock(out):
            if out.exists():
                merged.merge(_read_strict(out, first.device_kind))
            atomic_write(out, encode_cache(first.device_name, merged.entries, merged.updates))
    except OSError as exc:
        raise FlextuiError(f"{out}: cannot write the merged profiles "
                           f"({exc.strerror or exc})") from None
    return len(merged.entries)
