"""Measured communication times (a *communication calibration*) and their files.

FlexFlow times a transfer as latency + bytes / bandwidth from the link's spec; TensorOpt
found that rule up to 70% off. A :class:`CommCalibration` holds what ``measure_comm``
timed on real devices instead: one-way point-to-point time and all-reduce time against
message size. Between measured sizes times are interpolated linearly; below the
smallest the smallest's time is the floor (latency dominates); above the largest they
grow at the bandwidth of the last measured segment.

Files: ``<dir>/<device-kind-slug>.comm.msgpack``, a versioned msgpack document
(``flextui.documents``; never pickle) ``{"format": "flextui-comm-calibration",
"version": 1, "calibrations": [entry, ...]}`` with at most one entry per link kind (a
new measurement over a link kind replaces the old one). Everything read is validated;
a corrupt, foreign or newer file raises a one-line :class:`FlextuiError` naming the
file and what to do.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flextui.cost.cache_records import device_kind_slug
from flextui.cost.files import atomic_write, file_lock
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.fields import FieldReader
from flextui.limits import read_file

#: version 1 has no checksum (a checksum would make it version 2)
CALIBRATIONS = DocumentFormat("flextui-comm-calibration", 1, "communication calibration",
                              checksum=False)
SUFFIX = ".comm.msgpack"
_FIELD_NAMES = ("device", "backend", "link_kind", "hops", "world_size", "torch_version",
                "measured_at", "p2p", "allreduce")

#: a table of (message bytes, seconds), sizes strictly increasing
Table = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class CommCalibration:
    """Communication times measured on one machine.

    ``link_kind`` is the kind of the links the measured route crossed in the detected
    local cluster (``"pcie"`` between local GPUs, ``"loopback"`` between CPU ranks) and
    ``hops`` how many links that route had: a calibrated model charges each link of
    that kind ``p2p time / hops``, so a route like the measured one takes the measured
    time end to end. ``p2p`` is one-way send/recv time between GPUs (ping-pong / 2,
    median over repeats), and between CPU processes the time of an exchange after a
    burst of computing (mean over repeats: ``cost.comm``), median over device pairs;
    ``allreduce`` is all-reduce time over ``world_size`` ranks (slowest rank).
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
            _FIELDS.string(getattr(self, name), f"{name!r}")
        for name, least in (("hops", 1), ("world_size", 2)):
            _FIELDS.integer(getattr(self, name), f"{name!r}", least)
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
    def from_dict(cls, data: Any) -> CommCalibration:
        """Validate plain data; anything malformed raises FlextuiError naming the field."""
        data = _FIELDS.exact_keys(data, _FIELD_NAMES, "fields")
        return cls(**{f: data[f] for f in _FIELD_NAMES})


#: the checks of a calibration's fields (the file reader adds the file)
_FIELDS = FieldReader("calibration")


def _check_table(name: str, table: Any) -> Table:
    """A validated copy of ``table``: non-empty (bytes, seconds) pairs, sizes positive
    whole numbers strictly increasing, times positive and finite."""
    where = f"table {name!r}"
    rows: list[tuple[int, float]] = []
    for row in _FIELDS.items(table, where):
        nbytes, seconds = _FIELDS.items(row, f"{where} row", 2)
        nbytes = _FIELDS.integer(nbytes, f"{where} size", 1)
        seconds = _FIELDS.number(seconds, f"{where} time for {nbytes} bytes", minimum=0)
        if seconds <= 0:
            _FIELDS.fail(where, f"time {seconds!r} for {nbytes} bytes is not a positive "
                                "number of seconds")
        if rows and nbytes <= rows[-1][0]:
            _FIELDS.fail(where, f"sizes must increase, {nbytes} follows {rows[-1][0]}")
        rows.append((nbytes, seconds))
    if not rows:
        _FIELDS.fail(where, "expected a non-empty list of [bytes, seconds] pairs")
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
        data = read_file(path, None)
    except OSError as exc:
        raise FlextuiError(f"cannot read communication calibration {path}: "
                           f"{exc.strerror or exc}") from None
    try:
        _, body = CALIBRATIONS.decode(data)
    except BadDocument as bad:
        advice = ("move it away or give the directory of your calibrations"
                  if bad.problem.startswith("not a flextui") else
                  f"upgrade flextui or {redo}" if bad.newer_version else redo)
        raise FlextuiError(f"{path}: {bad.problem}; {advice}") from None
    layout = FieldReader()
    try:
        entries = layout.items(layout.exact_keys(body, ("calibrations",), "file")["calibrations"],
                               "calibrations")
    except FlextuiError as exc:
        raise FlextuiError(f"{path}: corrupt (bad layout of a calibration file: {exc}); "
                           f"{redo}") from None
    calibrations: list[CommCalibration] = []
    for i, entry in enumerate(entries):
        try:
            calibrations.append(CommCalibration.from_dict(entry))
        except FlextuiError as exc:
            raise FlextuiError(f"{path}: corrupt (calibration {i}: {exc}); {redo}") from None
    kinds = [c.link_kind for c in calibrations]
    if len(set(kinds)) != len(kinds):
        raise FlextuiError(f"{path}: corrupt (two calibrations of one link kind); {redo}")
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
        atomic_write(path, CALIBRATIONS.encode(
            {"calibrations": [c.to_dict() for c in [*kept, calibration]]}))
    return path
