"""Measured communication times (a *communication calibration*) and their files.

FlexFlow times a transfer as latency + bytes / bandwidth from the link's spec; TensorOpt
found that rule up to 70% off. A :class:`CommCalibration` holds what ``measure_comm``
timed on real devices instead: one-way point-to-point time and all-reduce time against
message size. Between measured sizes times are interpolated linearly; below the
smallest the smallest's time is the floor (latency dominates); above the largest they
grow at the bandwidth of the last measured segment.

Files: ``<dir>/<device-kind-slug>.comm.msgpack``, a msgpack map (never pickle)
``{"format": FORMAT_NAME, "version": FORMAT_VERSION, "calibrations": [entry, ...]}``
with at most one entry per link kind (a new measurement over a link kind replaces the
old one). Everything read is validated; a corrupt, foreign or newer file raises a
one-line :class:`FlextuiError` naming the file and what to do.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from flextui.cost.cache_records import device_kind_slug
from flextui.cost.files import atomic_write, file_lock
from flextui.errors import FlextuiError
from flextui.limits import NAME_CHARS

FORMAT_NAME = "flextui-comm-calibration"
FORMAT_VERSION = 1
SUFFIX = ".comm.msgpack"

#: a table of (message bytes, seconds), sizes strictly increasing
Table = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class CommCalibration:
    """Communication times measured on one machine.

    ``link_kind`` is the kind of the links the measured route crossed in the detected
    local cluster (``"pcie"`` between local GPUs, ``"loopback"`` between CPU ranks) and
    ``hops`` how many links that route had: a calibrated model charges each link of
    that kind ``p2p time / hops``, so a route like the measured one takes the measured
    time end to end. ``p2p`` is one-way send/recv time (ping-pong / 2, median over
    repeats, median over device pairs); ``allreduce`` is all-reduce time over
    ``world_size`` ranks (median over repeats, slowest rank).
    """

    device: str
    backend: str
    link_kind: str
    hops: int
    world_size: int
    torch_version: str
    measured_at: str
    p2p: Table
    allreduce: Table

    def __post_init__(self) -> None:
        for name in ("device", "backend", "link_kind", "torch_version", "measured_at"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or NAME_CHARS.problem(len(value)):
                raise FlextuiError(f"calibration field {name!r} must be a non-empty string "
                                   f"of at most {NAME_CHARS.value} characters, "
                                   f"found {value!r:.60}")
        for name, least in (("hops", 1), ("world_size", 2)):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
                raise FlextuiError(f"calibration field {name!r} must be a whole number "
                                   f">= {least}, found {value!r}")
        object.__setattr__(self, "p2p", _check_table("p2p", self.p2p))
        object.__setattr__(self, "allreduce", _check_table("allreduce", self.allreduce))

    def p2p_s(self, nbytes: float) -> float:
        """One-way time of ``nbytes`` between two devices, end to end."""
        return interpolate(self.p2p, nbytes)

    def allreduce_s(self, nbytes: float) -> float:
        """All-reduce time of ``nbytes`` over ``world_size`` ranks."""
        return interpolate(self.allreduce, nbytes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (msgpack/JSON-safe); ``from_dict`` rebuilds an equal calibration."""
        return {"device": self.device, "backend": self.backend, "link_kind": self.link_kind,
                "hops": self.hops, "world_size": self.world_size,
                "torch_version": self.torch_version, "measured_at": self.measured_at,
                "p2p": [list(row) for row in self.p2p],
                "allreduce": [list(row) for row in self.allreduce]}

    @classmethod
    def from_dict(cls, data: Any) -> "CommCalibration":
        """Validate plain data; anything malformed raises FlextuiError naming the field."""
        if not isinstance(data, dict):
            raise FlextuiError(f"a calibration must be a mapping, found {type(data).__name__}")
        fields = ("device", "backend", "link_kind", "hops", "world_size", "torch_version",
                  "measured_at", "p2p", "allreduce")
        missing = [f for f in fields if f not in data]
        unknown = sorted(str(k) for k in data if k not in fields)
        if missing or unknown:
            raise FlextuiError(f"calibration fields: missing {missing}, unknown {unknown}")
        return cls(**{f: data[f] for f in fields})


def _check_table(name: str, table: Any) -> Table:
    """A validated copy of ``table``: non-empty (bytes, seconds) pairs, sizes positive
    whole numbers strictly increasing, times positive and finite."""
    if not isinstance(table, (list, tuple)) or not table:
        raise FlextuiError(f"calibration table {name!r} must be a non-empty list of "
                           f"[bytes, seconds] pairs")
    rows: list[tuple[int, float]] = []
    for row in table:
        if not (isinstance(row, (list, tuple)) and len(row) == 2):
            raise FlextuiError(f"calibration table {name!r}: {row!r} is not a "
                               f"[bytes, seconds] pair")
        nbytes, seconds = row
        if not (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes > 0):
            raise FlextuiError(f"calibration table {name!r}: size {nbytes!r} is not a "
                               f"positive whole number of bytes")
        if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                and math.isfinite(seconds) and seconds > 0):
            raise FlextuiError(f"calibration table {name!r}: time {seconds!r} for {nbytes} "
                               f"bytes is not a positive number of seconds")
        if rows and nbytes <= rows[-1][0]:
            raise FlextuiError(f"calibration table {name!r}: sizes must increase, "
                               f"{nbytes} follows {rows[-1][0]}")
        rows.append((nbytes, float(seconds)))
    return tuple(rows)


# -- reading a table -------------------------------------------------------------------


def interpolate(table: Table, nbytes: float) -> float:
    """Seconds for ``nbytes`` from a (bytes, seconds) table: linear between measured
    sizes, the smallest size's time below it, and above the largest the last time plus
    the extra bytes at the last segment's bandwidth (at the last size's average
    bandwidth, bytes / time, when there is one row or the last segment does not rise)."""
    sizes = [b for b, _ in table]
    if nbytes <= sizes[0]:
        return table[0][1]
    i = bisect.bisect_left(sizes, nbytes)
    if i < len(table):
        (b0, t0), (b1, t1) = table[i - 1], table[i]
        return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    b1, t1 = table[-1]
    seconds_per_byte = t1 / b1
    if len(table) > 1:
        b0, t0 = table[-2]
        if t1 > t0:
            seconds_per_byte = (t1 - t0) / (b1 - b0)
    return t1 + (nbytes - b1) * seconds_per_byte


def fit_latency_bandwidth(table: Table) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of the line t = latency + bytes / bandwidth that
    best fits ``table`` in relative error (so small sizes count as much as large ones).
    Latency is clamped at 0; bandwidth is inf when times do not grow with size. With one
    row all of its time is put down to bandwidth."""
    if len(table) == 1:
        nbytes, seconds = table[0]
        return 0.0, nbytes / seconds
    sizes = np.array([b for b, _ in table], dtype=float)
    times = np.array([t for _, t in table], dtype=float)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    (latency, slope), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    return max(float(latency), 0.0), (1.0 / float(slope) if slope > 0 else math.inf)


# -- files -----------------------------------------------------------------------------


def calibration_path(directory: str | Path, device_kind: str) -> Path:
    """Where the calibrations of ``device_kind`` live in ``directory``."""
    return Path(directory) / f"{device_kind_slug(device_kind)}{SUFFIX}"


def read_calibrations(path: str | Path) -> list[CommCalibration]:
    """Every calibration in the file at ``path``, validated."""
    path = Path(path)
    redo = "delete it and run the communication calibration again"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FlextuiError(f"cannot read communication calibration {path}: "
                           f"{exc.strerror or exc}") from None
    try:
        document = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001 (any msgpack decoding failure: truncated, garbage)
        raise FlextuiError(f"{path} is corrupt or truncated (not msgpack); {redo}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise FlextuiError(f"{path} is not a flextui communication calibration; move it "
                           f"away or give the directory of your calibrations")
    version = document.get("version")
    if not (isinstance(version, int) and not isinstance(version, bool) and version >= 1):
        raise FlextuiError(f"{path} has a corrupt format version {version!r}; {redo}")
    if version > FORMAT_VERSION:
        raise FlextuiError(f"{path} was written by a newer flextui (calibration format "
                           f"version {version}, this one reads up to {FORMAT_VERSION}); "
                           f"upgrade flextui or {redo}")
    entries = document.get("calibrations")
    if not isinstance(entries, list) or set(document) != {"format", "version", "calibrations"}:
        raise FlextuiError(f"{path} is corrupt (bad layout of a calibration file); {redo}")
    calibrations: list[CommCalibration] = []
    for i, entry in enumerate(entries):
        try:
            calibrations.append(CommCalibration.from_dict(entry))
        except FlextuiError as exc:
            raise FlextuiError(f"{path} is corrupt (calibration {i}: {exc}); {redo}") from None
    kinds = [c.link_kind for c in calibrations]
    if len(set(kinds)) != len(kinds):
        raise FlextuiError(f"{path} is corrupt (two calibrations of one link kind); {redo}")
    return calibrations


def load_calibrations(directory: str | Path, device_kind: str) -> list[CommCalibration]:
    """The calibrations of ``device_kind`` saved in ``directory``; [] when there are none."""
    path = calibration_path(directory, device_kind)
    return read_calibrations(path) if path.exists() else []


def save_calibration(calibration: CommCalibration, directory: str | Path) -> Path:
    """Add ``calibration`` to its device kind's file in ``directory`` (replacing an
    earlier one of the same link kind) and return the file's path. Safe under
    concurrent writers; an unreadable existing file is reported, never overwritten."""
    path = calibration_path(directory, calibration.device)
    with file_lock(path):
        kept = [c for c in (read_calibrations(path) if path.exists() else [])
                if c.link_kind != calibration.link_kind]
        document = {"format": FORMAT_NAME, "version": FORMAT_VERSION,
                    "calibrations": [c.to_dict() for c in [*kept, calibration]]}
        atomic_write(path, msgpack.packb(document, use_bin_type=True))
    return path
