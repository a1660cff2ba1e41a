"""The run log (``.ffrun``): what a launch ran and what its ranks reported, written as it
runs and readable after a crash, as a search log is.

Layout: the magic line ``b"FFRUN\\n"``, then framed msgpack records (the ``.ffsearch``
framing, ``search.logformat.frame``: a length, a CRC-32 of the body and a CRC-16 of the
head, so a torn last record reads as a log cut short and damage as damage)::

    [0, {"version", "flextui", "created", "graph", "graph_hash", "cluster",
         "strategy", "num_ranks", "training", "commands", "target", "simulated"}]  header
    [1, record]            a rank's metrics record (``runtime.metrics``), as it came
    [2, rank, line]        a line of a rank's other output (rank -1: torchrun's own)
    [3, {"status", "exit_code", "failed_rank", "message", "elapsed_s"}]     final

``commands`` start the run (torchrun here, or per host ssh -> the node program's
torchrun); ``target`` is where, the launch's ``LaunchTarget``: ``{"hosts", "port",
"run_id", "ssh", "python"}`` (no hosts, ssh or python on this machine). A version 1 log
has ``"hosts"`` (["localhost"] on this machine) instead of ``target``: read, its target
names those hosts with the default ssh and Python, no port and no run id.
``simulated`` is what the simulator predicted for the strategy on the cluster:
``{"iteration_s", "busy_s": [per device], "cost_model"}``. ``status`` is "finished",
"failed" or "stopped". The launcher is the only writer; each record is written and
synced as it comes, so a killed launcher loses nothing it was told. A record that
cannot be written (a full disk) is a RunLogError, once: nothing is written after it,
so the log reads up to its last whole record.

``read_run_log`` decodes and checks every record once: the header is a ``RunHeader``
(the launch plan, the cluster, ...), the records are ``metrics`` records and the final
is the run's ``Outcome``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flextui import __version__
from flextui.documents import BadDocument, DocumentFormat, pack, unpack
from flextui.errors import FlextuiError
from flextui.fields import FieldReader
from flextui.limits import LimitError, read_file
from flextui.machine import Cluster
from flextui.runtime.hosts import Host
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import RankRecord, RecordError, decode_record
from flextui.runtime.spec import LaunchSpec
from flextui.runtime.summary import RunSummary, Simulated, device_labels, summarize
from flextui.runtime.target import LaunchTarget, Remote
from flextui.search.logfile import scan_frames
from flextui.search.logformat import frame, now_iso

MAGIC = b"FFRUN\n"
RUN_LOG = DocumentFormat("ffrun", 2, "run log", checksum=False)
TAG_HEADER, TAG_RECORD, TAG_OUTPUT, TAG_FINAL = range(4)
#: lines of output kept in the log, and characters of each (a chatty rank cannot fill
#: the disk through it)
MAX_OUTPUT_LINES, MAX_LINE_CHARS = 20_000, 1_000


class RunLogError(FlextuiError):
    """A run log that cannot be written or read."""


@dataclass(frozen=True)
class RunHeader:
    """What a launch ran: its plan (graph, strategy, ranks, training) on ``cluster``,
    the ``commands`` that started it at ``target``, and what the simulator predicted.
    ``created`` is filled by the writer."""

    spec: LaunchSpec
    cluster: Cluster
    commands: tuple[tuple[str, ...], ...]
    target: LaunchTarget
    simulated: Simulated
    created: str = ""
    flextui: str = __version__
    version: int = RUN_LOG.version

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "flextui": self.flextui, "created": self.created,
                **self.spec.to_dict(), "graph_hash": self.spec.graph.fingerprint,
                "cluster": self.cluster.to_dict(),
                "commands": [list(command) for command in self.commands],
                "target": self.target.to_dict(), "simulated": self.simulated.to_dict()}


def create_new(path: Path, what: str, flag: str, mode: str, **options: Any) -> Any:
    """``path`` opened as a new file (``mode`` holds ``x``): a log is never written over
    another file; RunLogError naming ``what`` (and ``flag``, to give another) else."""
    try:
        return open(path, mode, **options)
    except FileExistsError:
        raise RunLogError(f"{path} exists; a {what} is never overwritten: give another "
                          f"{flag}") from None
    except OSError as exc:
        raise RunLogError(f"cannot write {what} {path}: {exc.strerror or exc}") from None


class RunLogWriter:
    """Appends records to a new run log at ``path`` (never an existing file). The first
    record that cannot be written raises RunLogError; every write after it is skipped,
    so the log ends at its last whole record."""

    def __init__(self, path: str | Path, header: RunHeader) -> None:
        self.path = Path(path)
        self.lines = 0
        self.broken = False
        # held open while the run goes; unbuffered: a failed write leaves no rest
        self._file = create_new(self.path, "run log", "--run-log", "xb", buffering=0)
        try:
            self._write(MAGIC + frame(pack([TAG_HEADER, replace(header, created=now_iso())
                                            .to_dict()])))
        except RunLogError:  # not even a header: the file holds nothing worth keeping
            self.close()
            self.path.unlink(missing_ok=True)
            raise

    def record(self, record: RankRecord) -> None:
        self._write(frame(pack([TAG_RECORD, record.to_dict()])))

    def output(self, rank: int, line: str) -> None:
        if self.lines < MAX_OUTPUT_LINES:
            self.lines += 1
            self._write(frame(pack([TAG_OUTPUT, rank, line[:MAX_LINE_CHARS]])))

    def final(self, outcome: Outcome) -> None:
        self._write(frame(pack([TAG_FINAL, outcome.to_dict()])))

    def close(self) -> None:
        self._file.close()

    def _write(self, data: bytes) -> None:
        if self.broken:
            return
        view = memoryview(data)
        try:
            while view:  # a write to a filling disk may take only part of it
                view = view[os.write(self._file.fileno(), view):]
            os.fsync(self._file.fileno())
        except OSError as exc:
            self.broken = True
            raise RunLogError(f"cannot write run log {self.path}: "
                              f"{exc.strerror or exc}") from None


@dataclass
class RunLog:
    path: Path
    header: RunHeader
    records: list[RankRecord] = field(default_factory=list)
    output: list[tuple[int, str]] = field(default_factory=list)
    final: Outcome | None = None
    truncated: bool = False

    @property
    def status(self) -> str:
        """How the run ended, as people read it: its final status, else "cut short" (a
        torn last record) or "unfinished" (the launcher was killed between records)."""
        if self.final is not None:
            return str(self.final.status)
        return "cut short" if self.truncated else "unfinished"


_SHARED_KEYS = ("version", "flextui", "created", "graph", "strategy", "num_ranks",
                "training", "graph_hash", "cluster", "commands", "simulated")
#: a header's keys by version: version 1 named its hosts; version 2 its whole target, and
#: its model (what ran: a built-in, a module or a file, by its hash)
_HEADER_KEYS = {1: (*_SHARED_KEYS, "hosts"), 2: (*_SHARED_KEYS, "target", "model")}
_SPEC_KEYS = ("graph", "strategy", "num_ranks", "training")
_FINAL_KEYS = ("status", "exit_code", "failed_rank", "message", "elapsed_s")


def read_run_log(path: str | Path) -> RunLog:
    """Read and check a run log; a torn last record (a killed launcher) reads as
    ``truncated``, anything else wrong is one RunLogError naming the file."""
    path = Path(path)
    try:
        data = read_file(path, None)  # a regular file: a FIFO or a device is refused
    except OSError as exc:
        raise RunLogError(f"cannot read run log {path}: {exc.strerror or exc}") from None
    except LimitError as exc:
        raise RunLogError(str(exc)) from None
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
        if log is not None and log.final is not None:
            f.fail(where, "a record after the final record")
        if tag == TAG_HEADER:
            log = RunLog(path, _header(f, f.items(rec, where, 2)[1]))
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
            log.final = _final(f, f.items(rec, where, 2)[1], f"{where} final")
    if log is None:
        raise RunLogError(f"{path}: the run log's header is "
                          f"{'truncated' if frames.truncated else 'missing'}")
    log.truncated = frames.truncated
    return log


def _header(f: FieldReader, value: object) -> RunHeader:
    header = f.mapping(value, "header")
    try:
        version = RUN_LOG.check_version(header.get("version"))
    except BadDocument as bad:
        upgrade = "; upgrade flextui to read it" if bad.newer_version else ""
        f.fail("header", bad.problem + upgrade)
    header = f.exact_keys(header, _HEADER_KEYS[version], "header")
    try:
        spec = LaunchSpec.from_dict({"model": header.get("model"),
                                     **{key: header[key] for key in _SPEC_KEYS}},
                                    f"{f.source}: header", record=True)
    except FlextuiError as exc:
        raise RunLogError(str(exc)) from None
    try:
        cluster = Cluster.from_dict(f.mapping(header["cluster"], "header cluster"))
    except RunLogError:
        raise
    except Exception as exc:  # noqa: BLE001 (untrusted data: whatever it raises, the file is bad)
        f.fail("header cluster", str(exc))
    if spec.graph.fingerprint != header["graph_hash"]:
        f.fail("header graph_hash", f"the graph does not match its recorded hash "
                                    f"({spec.graph.fingerprint} != {header['graph_hash']!r:.40})")
    if cluster.num_devices != spec.num_ranks:
        f.fail("header cluster", f"{cluster.num_devices} devices for {spec.num_ranks} ranks")
    commands = tuple(tuple(f.string(word, "header commands", limit=None, empty=True)
                           for word in f.items(command, "header commands"))
                     for command in f.items(header["commands"], "header commands"))
    return RunHeader(spec, cluster, commands,
                     _target(f, header, version),
                     Simulated.read(f, header["simulated"], "header simulated",
                                    cluster.num_devices),
                     f.string(header["created"], "header created"),
                     f.string(header["flextui"], "header flextui"), version)


def _target(f: FieldReader, header: dict[str, Any], version: int) -> LaunchTarget:
    """Where the run ran: a version 1 header's hosts (["localhost"] on this machine), with
    the default ssh and Python and no port or run id, or a version 2 header's target."""
    try:
        if version >= 2:
            return LaunchTarget.read(f, header["target"], "header target")
        names = [f.string(host, "header hosts")
                 for host in f.items(header["hosts"], "header hosts")]
        if names == ["localhost"]:
            return LaunchTarget(run_id="")
        hosts = tuple(Host.parse(name, f"{f.source}: header hosts") for name in names)
        return LaunchTarget(hosts, Remote(), run_id="")
    except RunLogError:
        raise
    except FlextuiError as exc:  # a host name no host can have
        raise RunLogError(str(exc)) from None


def _final(f: FieldReader, value: object, where: str) -> Outcome:
    t = f.exact_keys(value, _FINAL_KEYS, where)
    rank = t["failed_rank"]
    return Outcome(RunStatus(f.choice(t["status"], f"{where} status", tuple(RunStatus))),
                   f.integer(t["exit_code"], f"{where} exit_code"),
                   None if rank is None else f.integer(rank, f"{where} failed_rank", 0),
                   f.string(t["message"], f"{where} message", limit=None, empty=True),
                   f.number(t["elapsed_s"], f"{where} elapsed_s", 0.0))


def summary_of_log(log: RunLog) -> RunSummary:
    """The run's summary from its log: the records against the header's simulated
    figures, on the header's cluster."""
    cluster, spec = log.header.cluster, log.header.spec
    return summarize(log.records, device_labels(cluster, spec.graph, spec.strategy),
                     [d.spec.memory_bytes for d in cluster.devices],
                     log.header.spec.graph.batch_size, log.header.simulated)
