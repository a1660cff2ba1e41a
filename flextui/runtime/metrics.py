"""What ranks report: typed records, each one JSON line on the rank's stdout.

A rank writes a line ``@flextui {...}`` (under 4 KiB, so a pipe never interleaves it
with another rank's) when it starts, at most twice a second while it trains (the steps
since its last report, summed; every MAX_LOSSES steps when they are quicker), when a
check ends, when it fails and when it ends.
torchrun relays the lines (with ``[rankN]:`` in front) and the launcher picks them out
of the ranks' other output; no port is opened for them.

Each kind (``RecordKind``) is a frozen dataclass: ``Start`` (rank, pid, host, device,
the steps it will run), ``Steps`` (the first and last step covered, ``warmup``, and
sums over them: seconds of a step, of compute and of waiting on communication, bytes
sent and received, the rank's share of each step's loss, one per step (a run log
written before every step's share was kept may hold one, their mean: read, those steps
have no loss); the rank's peak memory so far
and GPU utilisation, or None), ``Check`` (the largest relative errors against one
process), ``Tasks`` (with ``--record-profile``: the mean time of each of the rank's
tasks, ``runtime.tasktimes``), ``Evaluated`` (with ``--eval-every``: the rank's share of
the validation loss after a step), ``Failed`` (when the rank raised, by its clock, and
what) and ``End``. The rank encodes a record (``encode``); the launcher decodes and
checks it once, where it reads the line (``read_line``), and hands the record itself
to the run log and every display. A line that starts as a record and is not one is a
RecordError naming the field.

A loss, or a check's error, that is not finite (a diverging run's) is written as its
name, ``"nan"``, ``"inf"`` or ``"-inf"`` (JSON has no such numbers), and read back as
that float; every other number of a record is finite.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Self

from flextui.errors import FlextuiError
from flextui.fields import FieldReader

PREFIX = "@flextui "
MAX_LINE = 4000
REPORT_S = 0.5
#: the most steps one ``steps`` record covers: a rank reports as soon as it has this many,
#: so every step's loss share crosses (before, a longer report sent their mean alone)
MAX_LOSSES = 64
#: the names a record writes a value JSON cannot hold by: a loss may be any of them, a
#: check's relative error the first two
LOSS_NAMES = ("nan", "inf", "-inf")
ERROR_NAMES = ("nan", "inf")


class RecordKind(StrEnum):
    START = "start"
    STEPS = "steps"
    CHECK = "check"
    TASKS = "tasks"
    EVAL = "eval"
    FAILED = "failed"
    END = "end"


class RecordError(FlextuiError):
    """A line that starts as a rank's record and is not one."""


class _Record:
    """What every record kind shares: its kind, its encoding and how it is read."""

    kind: ClassVar[RecordKind]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data (a JSON line's, and the run log's)."""
        return {"kind": str(self.kind),
                **{f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}}

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        """The record from its fields (every one present), checked with ``f``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Start(_Record):
    """A rank has started: its process, host and device, and the steps it will run."""

    kind: ClassVar[RecordKind] = RecordKind.START
    rank: int
    pid: int
    host: str
    device: str
    steps: int
    warmup: int

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t), f.integer(t["pid"], "pid", 1), f.string(t["host"], "host"),
                   f.string(t["device"], "device"), f.integer(t["steps"], "steps", 0),
                   f.integer(t["warmup"], "warmup", 0))


@dataclass(frozen=True)
class Steps(_Record):
    """Sums over the steps ``first`` to ``last`` of one rank (see the module)."""

    kind: ClassVar[RecordKind] = RecordKind.STEPS
    rank: int
    first: int
    last: int
    warmup: bool
    step_s: float
    compute_s: float
    wait_s: float
    sent: int
    received: int
    losses: tuple[float, ...]
    peak_memory: int
    gpu_util: float | None

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def step_losses(self) -> tuple[float, ...] | None:
        """The rank's share of each step's loss, None when the record holds their mean
        alone (an older flextui's report of more than MAX_LOSSES steps)."""
        return self.losses if len(self.losses) == self.count else None

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        first = f.integer(t["first"], "first", 0)
        last = f.integer(t["last"], "last", first)
        losses = _losses(f, t["losses"], "losses", MAX_LOSSES)
        if len(losses) not in (1, last - first + 1):
            f.fail("losses", f"expected one value per step ({last - first + 1}), or their "
                             f"mean, found {len(losses)}")
        util = t["gpu_util"]
        return cls(_rank(f, t), first, last,
                   f.boolean(t["warmup"], "warmup"), f.number(t["step_s"], "step_s", 0.0),
                   f.number(t["compute_s"], "compute_s", 0.0),
                   f.number(t["wait_s"], "wait_s", 0.0), f.integer(t["sent"], "sent", 0),
                   f.integer(t["received"], "received", 0), losses,
                   f.integer(t["peak_memory"], "peak_memory", 0),
                   None if util is None else f.number(util, "gpu_util", 0.0, 100.0))


@dataclass(frozen=True)
class Check(_Record):
    """A checked run's rank against one process: the largest relative errors of the
    loss and of its parameter shards, and each step's loss both ways."""

    kind: ClassVar[RecordKind] = RecordKind.CHECK
    rank: int
    loss_error: float
    param_error: float
    losses: tuple[float, ...]
    reference_losses: tuple[float, ...]

    @property
    def worst(self) -> float:
        """The larger error; infinite when either is not a number."""
        if math.isnan(self.loss_error) or math.isnan(self.param_error):
            return math.inf
        return max(self.loss_error, self.param_error)

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t), _measured(f, t["loss_error"], "loss_error", ERROR_NAMES, 0.0),
                   _measured(f, t["param_error"], "param_error", ERROR_NAMES, 0.0),
                   _losses(f, t["losses"], "losses"),
                   _losses(f, t["reference_losses"], "reference_losses"))


@dataclass(frozen=True)
class TaskRow:
    """The mean time of one task of op ``op`` with block ``shape``, forward and backward
    (None: it has none), over ``runs`` runs of it."""

    op: int
    shape: tuple[int, ...]
    forward_s: float
    backward_s: float | None
    runs: int

    def to_list(self) -> list[Any]:
        return [self.op, list(self.shape), self.forward_s, self.backward_s, self.runs]

    @classmethod
    def read(cls, f: FieldReader, value: object, where: str) -> TaskRow:
        op, shape, forward, backward, runs = f.items(value, where, 5)
        return cls(f.integer(op, f"{where} op", 0),
                   tuple(f.integer(n, f"{where} shape", 1) for n in f.items(shape, where)),
                   f.number(forward, f"{where} forward", 0.0),
                   None if backward is None else f.number(backward, f"{where} backward", 0.0),
                   f.integer(runs, f"{where} runs", 1))


@dataclass(frozen=True)
class Tasks(_Record):
    """Some of a rank's task times (a rank sends as many as keep each line short)."""

    kind: ClassVar[RecordKind] = RecordKind.TASKS
    rank: int
    device: str      # the name profiles of the rank's device have
    steps: int
    tasks: tuple[TaskRow, ...]

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t), f.string(t["device"], "device"), f.integer(t["steps"], "steps", 0),
                   tuple(TaskRow.read(f, row, f"tasks[{n}]")
                         for n, row in enumerate(f.items(t["tasks"], "tasks"))))


@dataclass(frozen=True)
class Evaluated(_Record):
    """An evaluation pass after step ``step`` (from 0, warm-up counted): the rank's share
    of the mean loss over the batches of the dataset's validation split."""

    kind: ClassVar[RecordKind] = RecordKind.EVAL
    rank: int
    step: int
    loss: float

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t), f.integer(t["step"], "step", 0),
                   _measured(f, t["loss"], "loss", LOSS_NAMES))


@dataclass(frozen=True)
class Failed(_Record):
    """A rank raised: when, by its clock (the first to fail is the cause), and what."""

    kind: ClassVar[RecordKind] = RecordKind.FAILED
    rank: int
    time: float      # seconds since the epoch, by the rank's clock
    error: str

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t), f.number(t["time"], "time", 0.0),
                   f.string(t["error"], "error", limit=None, empty=True))


@dataclass(frozen=True)
class End(_Record):
    """A rank has ended well."""

    kind: ClassVar[RecordKind] = RecordKind.END
    rank: int

    @classmethod
    def read(cls, f: FieldReader, t: dict[str, Any]) -> Self:
        return cls(_rank(f, t))


RankRecord = Start | Steps | Check | Tasks | Evaluated | Failed | End
_KINDS: dict[RecordKind, type[RankRecord]] = {
    cls.kind: cls for cls in (Start, Steps, Check, Tasks, Evaluated, Failed, End)}


def encode(record: RankRecord) -> str:
    line = PREFIX + json.dumps(record.to_dict(), separators=(",", ":"), allow_nan=False)
    if len(line.encode()) > MAX_LINE:
        raise ValueError(f"a metrics record of {len(line)} characters is over {MAX_LINE}")
    return line


def read_line(text: str, where: str) -> RankRecord | None:
    """The record a rank's output line holds (after torchrun's ``[rankN]:``), None for
    any other line; RecordError (naming ``where``) for a line that starts as a record
    and is not one."""
    at = text.find(PREFIX)
    if at < 0:
        return None
    try:
        data = json.loads(text[at + len(PREFIX):])
    except ValueError as exc:
        raise RecordError(f"{where}: not JSON ({str(exc)[:80]})") from None
    return decode_record(data, where)


def decode_record(data: object, where: str) -> RankRecord:
    """The record ``data`` (a JSON line's, or a run log's) holds, every field checked;
    RecordError naming ``where`` and the field."""
    f = FieldReader(where, RecordError)
    table = f.mapping(data, "record")
    kind = RecordKind(f.choice(table.get("kind"), "kind", tuple(RecordKind)))
    cls = _KINDS[kind]
    f.exact_keys(table, ("kind", *(x.name for x in dataclasses.fields(cls))), str(kind))
    return cls.read(f, table)


def _plain(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)   # "nan", "inf", "-inf": the names the readers take
    if isinstance(value, TaskRow):
        return value.to_list()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _rank(f: FieldReader, t: dict[str, Any]) -> int:
    return f.integer(t["rank"], "rank", 0)


def _losses(f: FieldReader, value: object, name: str,
            most: int | None = None) -> tuple[float, ...]:
    items = f.items(value, name)
    if most is not None and len(items) > most:
        f.fail(name, f"expected at most {most} values, found {len(items)}")
    return tuple(_measured(f, x, name, LOSS_NAMES) for x in items)


def _measured(f: FieldReader, value: object, name: str, names: tuple[str, ...],
              minimum: float | None = None) -> float:
    """A measured value: a number from ``minimum``, or one of ``names`` for one that is
    not finite."""
    if isinstance(value, str) and value in names:
        return float(value)
    return f.number(value, name, minimum)


@dataclass
class StepSums:
    """Sums over the steps one ``steps`` record covers, as they come."""

    first: int
    last: int
    warmup: bool
    step_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    sent: int = 0
    received: int = 0
    losses: list[float] = field(default_factory=list)


class Reporter:
    """Collects a rank's steps and writes a ``steps`` record at most every REPORT_S
    seconds, or once it holds MAX_LOSSES steps (and for the last step of a phase),
    through ``write`` (a line)."""

    def __init__(self, rank: int, write: Callable[[str], None],
                 memory: Callable[[], int], utilisation: Callable[[], float | None]) -> None:
        self.rank, self.write = rank, write
        self.memory, self.utilisation = memory, utilisation
        self.pending: StepSums | None = None
        self.last_report = 0.0

    def emit(self, record: RankRecord) -> None:
        self.write(encode(record))

    def step(self, index: int, warmup: bool, loss_share: float, step_s: float,
             compute_s: float, wait_s: float, sent: int, received: int, last: bool) -> None:
        sums = self.pending
        if sums is None or sums.warmup != warmup:
            self.flush()
            sums = self.pending = StepSums(index, index, warmup)
        sums.last = index
        sums.step_s += step_s
        sums.compute_s += compute_s
        sums.wait_s += wait_s
        sums.sent += sent
        sums.received += received
        sums.losses.append(loss_share)
        now = time.monotonic()
        if last or now - self.last_report >= REPORT_S or len(sums.losses) >= MAX_LOSSES:
            self.flush()
            self.last_report = now

    def flush(self) -> None:
        if self.pending is None:
            return
        sums, self.pending = self.pending, None
        self.emit(Steps(self.rank, sums.first, sums.last, sums.warmup, sums.step_s,
                        sums.compute_s, sums.wait_s, sums.sent, sums.received,
                        tuple(sums.losses),
                        self.memory(), self.utilisation()))
