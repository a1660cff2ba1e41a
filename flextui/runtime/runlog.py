"""The run log (``.ffrun``): what a launch ran and what its ranks reported, written as it
runs and readable after a crash, as a search log is.

Layout: the magic line ``b"FFRUN\\n"``, then framed msgpack records (the ``.ffsearch``
framing, ``search.logformat.frame``: a length, a CRC-32 of the body and a CRC-16 of the
head, so a torn last record reads as a log cut short and damage as damage)::

    [0, {"version", "flextui", "created", "graph", "graph_hash", "cluster",
         "strategy", "num_ranks", "training", "commands", "hosts", "simulated"}]  header
    [1, record]            a rank's metrics record (``runtime.metrics``), as it came
    [2, rank, line]        a line of a rank's other output (rank -1: torchrun's own)
    [3, {"status", "exit_code", "failed_rank", "message", "elapsed_s"}]     final

``commands`` start the run (torchrun here, or per host ssh -> the node program's
torchrun), ``hosts`` are where (["localhost"] on this machine). ``simulated`` is what
the simulator predicted for the strategy on the cluster:
``{"iteration_s", "busy_s": [per device], "cost_model"}``. ``status`` is "finished",
"failed" or "stopped". The launcher is the only writer; each record is flushed as it is
written, so a killed launcher loses nothing it was told.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flextui import __version__
from flextui.documents import BadDocument, DocumentFormat, pack, unpack
from flextui.errors import FlextuiError
from flextui.fields import FieldReader
from flextui.graph import graph_from_dict
from flextui.machine import Cluster
from flextui.runtime.metrics import RankRecord, RecordError, decode_record
from flextui.runtime.summary import RunSummary, summarize
from flextui.search.logfile import scan_frames
from flextui.search.logformat import frame, now_iso

MAGIC = b"FFRUN\n"
RUN_LOG = DocumentFormat("ffrun", 1, "run log", checksum=False)
TAG_HEADER, TAG_RECORD, TAG_OUTPUT, TAG_FINAL = range(4)
#: lines of output kept in the log, and characters of each (a chatty rank cannot fill
#: the disk through it)
MAX_OUTPUT_LINES, MAX_LINE_CHARS = 20_000, 1_000


class RunLogError(FlextuiError):
    """A run log that cannot be written or read."""


class RunLogWriter:
    """Appends records to a new run log at ``path`` (never an existing file)."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.lines = 0
        try:
            self._file = open(self.path, "xb")  # held open while the run goes
        except FileExistsError:
            raise RunLogError(f"{self.path} exists; a run log is never overwritten: give "
                              "another --run-log") from None
        except OSError as exc:
            raise RunLogError(f"cannot write run log {self.path}: "
                              f"{exc.strerror or exc}") from None
        body = {"version": RUN_LOG.version, "flextui": __version__, "created": now_iso(),
                **header}
        self._write(MAGIC + frame(pack([TAG_HEADER, body])))

    def record(self, record: RankRecord) -> None:
        self._write(frame(pack([TAG_RECORD, record.to_dict()])))

    def output(self, rank: int, line: str) -> None:
        if self.lines < MAX_OUTPUT_LINES:
            self.lines += 1
            self._write(frame(pack([TAG_OUTPUT, rank, line[:MAX_LINE_CHARS]])))

    def final(self, status: str, exit_code: int, failed_rank: int | None, message: str,
              elapsed_s: float) -> None:
        self._write(frame(pack([TAG_FINAL, {"status": status, "exit_code": exit_code,
                                            "failed_rank": failed_rank, "message": message,
                                            "elapsed_s": elapsed_s}])))

    def close(self) -> None:
        self._file.close()

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise RunLogError(f"cannot write run log {self.path}: "
                              f"{exc.strerror or exc}") from None


@dataclass
class RunLog:
    path: Path
    header: dict[str, Any]
    records: list[RankRecord] = field(default_factory=list)
    output: list[tuple[int, str]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    truncated: bool = False


def read_run_log(path: str | Path) -> RunLog:
    """Read and check a run log; a torn last record (a killed launcher) reads as
    ``truncated``, anything else wrong is one RunLogError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunLogError(f"cannot read run log {path}: {exc.strerror or exc}") from None
    if not data.startswith(MAGIC):
        raise RunLogError(f"{path} is not a flextui run log")
    frames = scan_frames(data, len(MAGIC), path)
    f = FieldReader(str(path), RunLogError)
    log: RunLog | None = None
    for n, (offset, body) in enumerate(frames.bodies):
        where = f"record {n} at byte {offset}"
        try:
            rec = f.items(unpack(body), where)
        except BadDocument as bad:
            raise RunLogError(f"{path}: {where} is malformed ({bad.problem})") from None
        tag = f.integer(rec[0] if rec else None, f"{where} tag", 0, TAG_FINAL)
        if (tag == TAG_HEADER) != (log is None):
            f.fail(where, "the header must be the first record, and only the first")
        if tag == TAG_HEADER:
            header = f.mapping(f.items(rec, where, 2)[1], f"{where} header")
            try:
                RUN_LOG.check_version(header.get("version"))
            except BadDocument as bad:
                upgrade = "; upgrade flextui to read it" if bad.newer_version else ""
                f.fail("header", bad.problem + upgrade)
            log = RunLog(path, header)
        elif log is not None and tag == TAG_RECORD:
            try:
                log.records.append(decode_record(f.items(rec, where, 2)[1], where))
            except RecordError as bad:
                raise RunLogError(f"{path}: {bad}") from None
        elif log is not None and tag == TAG_OUTPUT:
            _, rank, line = f.items(rec, where, 3)
            log.output.append((f.integer(rank, f"{where} rank", -1),
                               f.string(line, f"{where} line", limit=None, empty=True)))
        elif log is not None:
            log.final = f.mapping(f.items(rec, where, 2)[1], where)
    if log is None:
        raise RunLogError(f"{path}: the run log's header is "
                          f"{'truncated' if frames.truncated else 'missing'}")
    log.truncated = frames.truncated
    return log


def summary_of_log(log: RunLog) -> RunSummary:
    """The run's summary from its log: the records against the header's simulated
    figures, on the header's cluster."""
    header = log.header
    f = FieldReader(str(log.path), RunLogError)
    try:
        cluster = Cluster.from_dict(f.mapping(header.get("cluster"), "header cluster"))
        batch = graph_from_dict(f.mapping(header.get("graph"), "header graph")).batch_size
    except FlextuiError as exc:
        raise RunLogError(f"{log.path}: the header cannot be read ({exc})") from None
    simulated = header.get("simulated")
    return summarize(log.records, [d.name for d in cluster.devices],
                     [d.spec.memory_bytes for d in cluster.devices], batch,
                     simulated if isinstance(simulated, dict) else None)
