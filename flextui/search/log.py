"""Search logs (``.ffsearch``): what a search did, written as it runs, read for replay/resume.

Layout. The file starts with the magic line ``b"FFSEARCH\\n"``, then a sequence of
*frames*, one per record::

    frame  = length:u32le  body_crc:u32le  head_crc:u16le  body[length]
    body   = msgpack array [tag, ...]  (never pickle)

``body_crc`` is the CRC-32 of ``body``; ``head_crc`` is a CRC-16 (CCITT) of the 8 bytes
before it, so a damaged length is caught as corruption instead of passing for a file cut
short. Every record is checked on its own. A frame cut off by the end of the file (the
search was killed mid-write) is not an error: the reader returns the complete records and
says where they end, and :meth:`SearchLogWriter.resume` cuts the torn tail off before
appending.

Records (record 0 is always the header)::

    [0, {"version", "flextui", "created", "graph", "graph_hash", "cluster",
         "cluster_hash", "cost_model", "seed", "options"}]               header
    [1, chain, iteration, elapsed, op, config, proposed, current, best,
        accepted, memory]                                                step
    [2, chain, iteration]                                                restart
    [3, chain, iteration, elapsed, current, current_cost, best, best_cost,
        [rng_version, [rng ints...], gauss], frontier]                   checkpoint
    [4, reason, iterations, elapsed, best_cost, best, best_chain, frontier]  final

    config    = [[degree, ...], devices]   devices: a start device (int) when the tasks
                                           run on start..start+n-1, else a list of ids
    strategy  = [name, [config per op, in graph.ops order]]
    frontier  = [[time_s, memory_bytes, strategy], ...]

In a step record ``current`` is nil when it equals ``proposed`` and ``best`` is nil when it
equals ``current`` (the common cases); a step takes about 50-70 bytes with its frame.

Resumed searches: a chain's records are replayed in file order; a record whose iteration
is not after what the chain already recorded (a search resumed from an earlier
checkpoint) supersedes the chain's later records. ``SearchLog.steps`` keeps every step
record in file order; ``steps_of`` and ``strategy_at`` use the chain's effective history.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import math
import os
import random
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import msgpack

from flextui import __version__
from flextui.errors import FlextuiError, SearchLogError
from flextui.graph import OpGraph
from flextui.graph.builder import graph_from_dict
from flextui.machine import Cluster
from flextui.search.events import StepEvent
from flextui.strategy import ParallelConfig, Strategy

FORMAT_VERSION = 1
MAGIC = b"FFSEARCH\n"
REASONS = ("iterations", "time", "converged", "interrupted")

_FRAME = struct.Struct("<IIH")
_HEAD_CRC_INIT = 0xFFFF
_TAG_HEADER, _TAG_STEP, _TAG_RESTART, _TAG_CHECKPOINT, _TAG_FINAL = range(5)


# -- records --------------------------------------------------------------------------


@dataclass
class SearchHeader:
    graph: OpGraph
    cluster: Cluster
    cost_model: str
    seed: int
    options: dict[str, Any]
    flextui_version: str = __version__
    created: str = ""                 # ISO time, filled by the writer if empty
    version: int = FORMAT_VERSION     # the log format version


@dataclass
class Checkpoint:
    chain: int
    iteration: int
    elapsed: float
    current: Strategy
    current_cost: float
    best: Strategy
    best_cost: float
    rng_state: tuple                  # as random.Random.getstate() returns it


@dataclass(frozen=True)
class FrontierPoint:
    time: float
    memory: int
    strategy: Strategy


@dataclass
class FinalRecord:
    reason: str                       # one of REASONS
    iterations: int
    elapsed: float
    best_cost: float
    best: Strategy
    best_chain: int
    frontier: list[FrontierPoint]


# -- framing --------------------------------------------------------------------------


def _frame(body: bytes) -> bytes:
    head = struct.pack("<II", len(body), zlib.crc32(body))
    return head + struct.pack("<H", binascii.crc_hqx(head, _HEAD_CRC_INIT)) + body


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")


# -- writer ---------------------------------------------------------------------------


class _Encoder:
    """Strategy/config encoding against one graph; configs are checked once and cached."""

    def __init__(self, graph: OpGraph, cluster: Cluster) -> None:
        self.ops = graph.ops
        self.num_devices = cluster.num_devices
        self._configs: dict[tuple[int, ParallelConfig], list] = {}

    def config(self, index: int, config: ParallelConfig) -> list:
        key = (index, config)
        enc = self._configs.get(key)
        if enc is None:
            config.check(self.ops[index], self.num_devices)
            devices = config.devices
            start = devices[0] if devices else 0
            if devices and devices == tuple(range(start, start + len(devices))):
                enc = [list(config.degrees), start]
            else:
                enc = [list(config.degrees), list(devices)]
            self._configs[key] = enc
        return enc

    def strategy(self, strategy: Strategy) -> list:
        try:
            configs = [self.config(i, strategy[op.name]) for i, op in enumerate(self.ops)]
        except KeyError as exc:
            raise SearchLogError(f"cannot log strategy {strategy.name!r}: it has no config for "
                                 f"op {exc.args[0]!r}") from None
        return [strategy.name, configs]

    def frontier(self, points: list[FrontierPoint]) -> list:
        return [[float(p.time), int(p.memory), self.strategy(p.strategy)] for p in points]


class SearchLogWriter:
    """Appends records to a ``.ffsearch`` file. Records are buffered; :meth:`flush` writes
    them out, and adding a record flushes by itself once ``flush_interval`` seconds have
    passed since the last flush, so a killed search loses at most that much."""

    def __init__(self, path: str | Path, header: SearchHeader, flush_interval: float = 1.0,
                 *, _file: Any = None) -> None:
        if flush_interval < 0:
            raise ValueError("flush_interval must be >= 0")
        self.path = Path(path)
        self.header = header
        self.flush_interval = float(flush_interval)
        self._enc = _Encoder(header.graph, header.cluster)
        self._buffer: list[bytes] = []
        self._closed = False
        self._last_flush = time.monotonic()
        if _file is not None:             # resume(): the file is open and positioned
            self._file = _file
            return
        if not header.created:
            header.created = _now_iso()
        body = self._pack(self._header_body(header))
        try:
            self._file = open(self.path, "wb")  # noqa: SIM115 (kept open while writing)
        except OSError as exc:
            raise SearchLogError(f"cannot write search log {self.path}: "
                                 f"{exc.strerror or exc}") from None
        self._buffer.append(MAGIC + _frame(body))
        try:
            self.flush()
        except BaseException:
            self._file.close()
            raise

    @classmethod
    def resume(cls, log: SearchLog, flush_interval: float = 1.0) -> SearchLogWriter:
        """Reopen ``log.path`` to append to it; a torn last record is cut off first."""
        path = Path(log.path)
        try:
            f = open(path, "r+b")  # noqa: SIM115 (handed to the writer)
        except OSError as exc:
            raise SearchLogError(f"cannot reopen search log {path}: {exc.strerror or exc}") from None
        try:
            size = os.fstat(f.fileno()).st_size
            expected = log._size if log._size is not None else (
                size if log.truncated else log.complete_bytes)
            if size != expected or size < log.complete_bytes:
                raise SearchLogError(f"{path} changed since it was read ({size} bytes, "
                                     f"expected {expected}); read it again before resuming")
            if size > log.complete_bytes:
                f.truncate(log.complete_bytes)
            f.seek(log.complete_bytes)
        except OSError as exc:
            f.close()
            raise SearchLogError(f"cannot resume search log {path}: {exc.strerror or exc}") from None
        except BaseException:
            f.close()
            raise
        return cls(path, log.header, flush_interval, _file=f)

    # -- records --

    def _header_body(self, h: SearchHeader) -> list:
        if not isinstance(h.options, dict) or not all(isinstance(k, str) for k in h.options):
            raise SearchLogError("search options must be a mapping with string keys")
        if type(h.seed) is not int or not isinstance(h.cost_model, str):
            raise SearchLogError(f"the search seed must be an integer and the cost model a string "
                                 f"(got {h.seed!r:.40} and {h.cost_model!r:.40})")
        return [_TAG_HEADER, {
            "version": int(h.version), "flextui": h.flextui_version, "created": h.created,
            "graph": h.graph.to_dict(), "graph_hash": h.graph.fingerprint,
            "cluster": h.cluster.to_dict(), "cluster_hash": h.cluster.fingerprint,
            "cost_model": h.cost_model, "seed": h.seed, "options": h.options,
        }]

    @staticmethod
    def _pack(record: list) -> bytes:
        try:
            return msgpack.packb(record, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SearchLogError(f"cannot store a search-log record: {exc}") from None

    def _add(self, record: list) -> None:
        if self._closed:
            raise ValueError(f"search log {self.path} is closed")
        self._buffer.append(_frame(self._pack(record)))
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def step(self, event: StepEvent) -> None:
        current = None if event.current == event.proposed else float(event.current)
        best = None if event.best == event.current else float(event.best)
        op = int(event.op)
        self._add([_TAG_STEP, int(event.chain), int(event.iteration), float(event.elapsed), op,
                   self._enc.config(op, event.config), float(event.proposed), current, best,
                   bool(event.accepted), int(event.memory)])

    def restart(self, chain: int, iteration: int) -> None:
        self._add([_TAG_RESTART, int(chain), int(iteration)])

    def checkpoint(self, cp: Checkpoint, frontier: list[FrontierPoint]) -> None:
        version, internal, gauss = cp.rng_state
        self._add([_TAG_CHECKPOINT, int(cp.chain), int(cp.iteration), float(cp.elapsed),
                   self._enc.strategy(cp.current), float(cp.current_cost),
                   self._enc.strategy(cp.best), float(cp.best_cost),
                   [version, list(internal), gauss], self._enc.frontier(frontier)])

    def final(self, record: FinalRecord) -> None:
        if record.reason not in REASONS:
            raise ValueError(f"final reason must be one of {', '.join(REASONS)}, "
                             f"not {record.reason!r}")
        self._add([_TAG_FINAL, record.reason, int(record.iterations), float(record.elapsed),
                   float(record.best_cost), self._enc.strategy(record.best), int(record.best_chain),
                   self._enc.frontier(record.frontier)])
        self.flush()

    # -- file --

    def flush(self) -> None:
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            try:
                self._file.write(data)
                self._file.flush()
            except OSError as exc:
                raise SearchLogError(f"cannot write search log {self.path}: "
                                     f"{exc.strerror or exc}") from None
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the log as read ------------------------------------------------------------------


@dataclass
class SearchLog:
    path: Path
    header: SearchHeader
    steps: list[StepEvent]                # every step record, in file order
    restarts: list[tuple[int, int]]       # (chain, iteration)
    checkpoints: list[Checkpoint]
    frontiers: list[list[FrontierPoint]]  # the frontier stored with each checkpoint
    final: FinalRecord | None
    truncated: bool                       # the last record was incomplete (killed search)
    complete_bytes: int                   # file offset where the last complete record ends
    record_offsets: list[int] = field(default_factory=list)  # where each complete record starts
    # chain -> its effective records in order: ("s", StepEvent) | ("r", iteration) | ("c", Checkpoint)
    _history: dict[int, list[tuple[str, Any]]] = field(default_factory=dict, repr=False,
                                                       compare=False)
    _size: int | None = field(default=None, repr=False, compare=False)  # file size when read

    def _histories(self) -> dict[int, list[tuple[str, Any]]]:
        if not self._history and (self.steps or self.checkpoints or self.restarts):
            # built by hand rather than read: order each chain's records by iteration
            rank = {"s": 0, "r": 1, "c": 2}
            items = ([(e.chain, e.iteration, "s", e) for e in self.steps]
                     + [(c, i, "r", i) for c, i in self.restarts]
                     + [(cp.chain, cp.iteration, "c", cp) for cp in self.checkpoints])
            for chain, it, kind, obj in sorted(items, key=lambda x: (x[0], x[1], rank[x[2]])):
                self._history.setdefault(chain, []).append((kind, obj))
        return self._history

    def _history_of(self, chain: int) -> list[tuple[str, Any]]:
        hist = self._histories().get(chain)
        if hist is None:
            raise SearchLogError(f"{self.path}: no chain {chain} in the log "
                                 f"(chains: {', '.join(map(str, self.chains())) or 'none'})")
        return hist

    def chains(self) -> list[int]:
        return sorted(self._histories())

    def steps_of(self, chain: int) -> list[StepEvent]:
        """The chain's steps in order (steps superseded by a resumed search left out)."""
        return [obj for kind, obj in self._histories().get(chain, ()) if kind == "s"]

    def last_checkpoint(self, chain: int) -> Checkpoint | None:
        for kind, obj in reversed(self._histories().get(chain, ())):
            if kind == "c":
                return obj
        return None

    def strategy_at(self, chain: int, iteration: int) -> Strategy:
        """The chain's current strategy after ``iteration`` steps (0 = its initial one),
        a restart recorded at ``iteration`` included."""
        hist = self._history_of(chain)
        last = max(_iteration_of(kind, obj) for kind, obj in hist)
        if not 0 <= iteration <= last:
            raise SearchLogError(f"{self.path}: chain {chain} has iterations 0..{last}; "
                                 f"{iteration} is out of range")
        base = None
        for i in range(len(hist) - 1, -1, -1):
            kind, obj = hist[i]
            if kind == "c" and obj.iteration <= iteration:
                base = i
                break
        if base is None:
            raise SearchLogError(f"{self.path}: chain {chain} has no checkpoint at or before "
                                 f"iteration {iteration}")
        cp: Checkpoint = hist[base][1]
        ops = self.header.graph.ops
        current = dict(cp.current)
        best, best_cost = current if cp.best == cp.current else dict(cp.best), cp.best_cost
        changed = False
        for kind, obj in hist[base + 1:]:
            if _iteration_of(kind, obj) > iteration:
                break
            if kind == "s":
                if obj.accepted:
                    if best is current:
                        current = dict(current)
                    current[ops[obj.op].name] = obj.config
                    changed = True
                    if obj.proposed <= best_cost:
                        best, best_cost = current, obj.proposed
            elif kind == "r":
                current = best
                changed = True
        if not changed:
            return cp.current
        return Strategy(current, cp.current.name)

    def best_strategy(self) -> tuple[Strategy, float]:
        """The best strategy and its cost: from the final record, else the best of what
        the checkpoints and accepted steps recorded."""
        if self.final is not None:
            return self.final.best, self.final.best_cost
        found: tuple[Strategy, float] | None = None
        for cp in self.checkpoints:
            if found is None or cp.best_cost < found[1]:
                found = (cp.best, cp.best_cost)
        if found is None:
            raise SearchLogError(f"{self.path}: the log records no strategy yet")
        step = None
        for chain in self.chains():
            for e in self.steps_of(chain):
                if e.accepted and e.proposed < (found[1] if step is None else step.proposed):
                    step = e
        if step is not None:
            try:
                before = self.strategy_at(step.chain, step.iteration - 1)
            except SearchLogError:
                return found
            return before.replace(self.header.graph.ops[step.op].name, step.config), step.proposed
        return found


def _iteration_of(kind: str, obj: Any) -> int:
    return obj if kind == "r" else obj.iteration


# -- reader ---------------------------------------------------------------------------


class _Bad(Exception):
    """Malformed record content; the reader adds the file and record number."""


def _int(v: Any, what: str, lo: int | None = 0) -> int:
    if type(v) is not int or (lo is not None and v < lo):
        raise _Bad(f"{what} must be an integer" + (f" >= {lo}" if lo is not None else "")
                   + f", found {v!r:.40}")
    return v


def _float(v: Any, what: str, nonneg: bool = False) -> float:
    if type(v) is int:
        v = float(v)
    if type(v) is not float or (nonneg and not v >= 0):
        raise _Bad(f"{what} must be a {'non-negative ' if nonneg else ''}number, found {v!r:.40}")
    return v


def _str(v: Any, what: str) -> str:
    if type(v) is not str:
        raise _Bad(f"{what} must be a string, found {type(v).__name__}")
    return v


def _list(v: Any, what: str, n: int | None = None) -> list:
    if type(v) is not list or (n is not None and len(v) != n):
        raise _Bad(f"{what} must be a list" + (f" of {n} items" if n is not None else "")
                   + (f", found {len(v)} items" if type(v) is list else
                      f", found {type(v).__name__}"))
    return v


class _Decoder:
    def __init__(self, graph: OpGraph, cluster: Cluster) -> None:
        self.ops = graph.ops
        self.names = [op.name for op in graph.ops]
        self.num_devices = cluster.num_devices
        self._configs: dict[tuple, ParallelConfig] = {}

    def config(self, index: int, data: Any, what: str) -> ParallelConfig:
        if type(data) is not list or len(data) != 2 or type(data[0]) is not list:
            raise _Bad(f"{what}: a config must be [degrees, devices]")
        degrees, devices = data
        if not all(type(d) is int for d in degrees):
            raise _Bad(f"{what}: op {self.names[index]!r}: degrees must be integers")
        if type(devices) is list:
            if not all(type(d) is int for d in devices):
                raise _Bad(f"{what}: op {self.names[index]!r}: device ids must be integers")
            key = (index, tuple(degrees), tuple(devices))
        elif type(devices) is int:
            key = (index, tuple(degrees), devices)
        else:
            raise _Bad(f"{what}: op {self.names[index]!r}: devices must be a start device or a "
                       f"list of ids")
        config = self._configs.get(key)
        if config is not None:
            return config
        op = self.ops[index]
        if type(devices) is int:
            tasks = math.prod(degrees) if all(d >= 1 for d in degrees) else 0
            if not (tasks >= 1 and 0 <= devices and devices + tasks <= self.num_devices):
                raise _Bad(f"{what}: op {op.name!r}: devices {devices}.. for degrees {degrees} do "
                           f"not fit the cluster's {self.num_devices} devices")
            devices = tuple(range(devices, devices + tasks))
        else:
            devices = tuple(devices)
        config = ParallelConfig(tuple(degrees), devices)
        try:
            config.check(op, self.num_devices)
        except FlextuiError as exc:
            raise _Bad(f"{what}: the strategy does not fit the log's graph and cluster: {exc}") \
                from None
        self._configs[key] = config
        return config

    def strategy(self, data: Any, what: str) -> Strategy:
        data = _list(data, what, 2)
        name = _str(data[0], f"{what} name")
        configs = _list(data[1], f"{what} configs")
        if len(configs) != len(self.ops):
            raise _Bad(f"{what} has {len(configs)} op configs but the graph has {len(self.ops)} "
                       f"ops; it does not fit the log's graph")
        return Strategy({self.names[i]: self.config(i, c, what) for i, c in enumerate(configs)},
                        name)

    def frontier(self, data: Any, what: str) -> list[FrontierPoint]:
        points = []
        for k, p in enumerate(_list(data, what)):
            p = _list(p, f"{what} point {k}", 3)
            points.append(FrontierPoint(_float(p[0], f"{what} point {k} time", True),
                                        _int(p[1], f"{what} point {k} memory"),
                                        self.strategy(p[2], f"{what} point {k} strategy")))
        return points


def _rng_state(data: Any) -> tuple:
    data = _list(data, "rng state", 3)
    version, internal, gauss = data
    internal = _list(internal, "rng state")
    if gauss is not None:
        gauss = _float(gauss, "rng gauss")
    state = (_int(version, "rng version"), tuple(internal), gauss)
    try:
        random.Random().setstate(state)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _Bad(f"rng state is not a valid random.Random state ({exc})") from None
    return state


def _header(path: Path, data: Any) -> SearchHeader:
    if type(data) is not list or len(data) != 2 or data[0] != _TAG_HEADER or type(data[1]) is not dict:
        raise _Bad("the first record is not a search-log header")
    h = data[1]
    version = h.get("version")
    if type(version) is not int or version < 1:
        raise _Bad(f"header version must be a positive integer, found {version!r:.40}")
    if version > FORMAT_VERSION:
        raise SearchLogError(f"{path} was written by a newer flextui (format v{version}); "
                             f"upgrade flextui to read it (this one reads format "
                             f"v{FORMAT_VERSION})")
    missing = [k for k in ("flextui", "created", "graph", "graph_hash", "cluster", "cluster_hash",
                           "cost_model", "seed", "options") if k not in h]
    if missing:
        raise _Bad(f"header has no {', '.join(missing)}")
    try:
        graph = graph_from_dict(h["graph"])
    except Exception as exc:  # noqa: BLE001 (untrusted data: whatever it raises, the file is bad)
        raise _Bad(f"header graph cannot be rebuilt: {exc}") from None
    try:
        cluster = Cluster.from_dict(h["cluster"])
    except Exception as exc:  # noqa: BLE001
        raise _Bad(f"header cluster cannot be rebuilt: {exc}") from None
    if graph.fingerprint != h["graph_hash"]:
        raise _Bad(f"the header's model graph does not match its recorded hash "
                   f"({graph.fingerprint} != {h['graph_hash']!r:.40})")
    if cluster.fingerprint != h["cluster_hash"]:
        raise _Bad(f"the header's cluster does not match its recorded hash "
                   f"({cluster.fingerprint} != {h['cluster_hash']!r:.40})")
    options = h["options"]
    if type(options) is not dict or not all(type(k) is str for k in options):
        raise _Bad("header options must be a mapping with string keys")
    return SearchHeader(graph=graph, cluster=cluster,
                        cost_model=_str(h["cost_model"], "header cost_model"),
                        seed=_int(h["seed"], "header seed", None), options=options,
                        flextui_version=_str(h["flextui"], "header flextui version"),
                        created=_str(h["created"], "header created"), version=version)


def read_search_log(path: str | Path) -> SearchLog:
    """Read and validate a ``.ffsearch`` file. A torn last record (a killed search) is
    reported with ``truncated=True``; anything else wrong raises SearchLogError."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SearchLogError(f"cannot read search log {path}: {exc.strerror or exc}") from None
    if data[:len(MAGIC)] != MAGIC:
        why = " (it is empty)" if not data else ""
        raise SearchLogError(f"{path} is not a flextui search log{why}")

    records: list[tuple[int, Any]] = []       # (offset, unpacked body)
    pos, size = len(MAGIC), len(data)
    truncated = False
    while pos < size:
        n = len(records)
        if size - pos < _FRAME.size:
            truncated = True
            break
        length, body_crc, head_crc = _FRAME.unpack_from(data, pos)
        if binascii.crc_hqx(data[pos:pos + 8], _HEAD_CRC_INIT) != head_crc:
            if not data[pos:].strip(b"\0"):   # zero-filled tail (a crash before data hit disk)
                truncated = True
                break
            raise SearchLogError(f"{path}: record {n} at byte {pos} is corrupt (bad frame "
                                 f"checksum); the file is damaged")
        end = pos + _FRAME.size + length
        if end > size:
            truncated = True
            break
        body = data[pos + _FRAME.size:end]
        if zlib.crc32(body) != body_crc:
            raise SearchLogError(f"{path}: record {n} at byte {pos} is corrupt (checksum "
                                 f"mismatch); the file is damaged")
        try:
            records.append((pos, msgpack.unpackb(body, raw=False, strict_map_key=False)))
        except Exception as exc:  # noqa: BLE001 (any msgpack decoding failure)
            raise SearchLogError(f"{path}: record {n} at byte {pos} is malformed "
                                 f"({type(exc).__name__}: {exc})") from None
        pos = end
    if not records:
        raise SearchLogError(f"{path}: the search log's header is "
                             f"{'truncated' if truncated else 'missing'}; the file cannot be read")
    complete = pos

    try:
        header = _header(path, records[0][1])
    except _Bad as exc:
        raise SearchLogError(f"{path}: record 0 (the header) at byte {len(MAGIC)}: {exc}") from None
    log = SearchLog(path=path, header=header, steps=[], restarts=[], checkpoints=[], frontiers=[],
                    final=None, truncated=truncated, complete_bytes=complete,
                    record_offsets=[offset for offset, _ in records], _size=size)
    dec = _Decoder(header.graph, header.cluster)
    num_ops = len(header.graph.ops)
    hist = log._history
    for n, (offset, rec) in enumerate(records[1:], start=1):
        try:
            _record(log, dec, num_ops, hist, rec)
        except _Bad as exc:
            raise SearchLogError(f"{path}: record {n} at byte {offset}: {exc}") from None
    return log


def _supersede(hist: list[tuple[str, Any]], iteration: int, inclusive: bool) -> None:
    """Drop the chain's trailing records at/after ``iteration`` (a resumed search redid them)."""
    while hist:
        it = _iteration_of(*hist[-1])
        if it > iteration or (inclusive and it == iteration):
            hist.pop()
        else:
            break


def _record(log: SearchLog, dec: _Decoder, num_ops: int, hist: dict, rec: Any) -> None:
    if type(rec) is not list or not rec or type(rec[0]) is not int:
        raise _Bad("a record must be a list starting with its type tag")
    tag = rec[0]
    if tag == _TAG_STEP:
        if len(rec) != 11:
            raise _Bad(f"a step record has 11 fields, found {len(rec)}")
        _, chain, it, elapsed, op, cfg, proposed, current, best, accepted, memory = rec
        chain = _int(chain, "step chain")
        op = _int(op, "step op")
        if op >= num_ops:
            raise _Bad(f"step op index {op} is out of range (the graph has {num_ops} ops)")
        proposed = _float(proposed, "step proposed cost")
        current = proposed if current is None else _float(current, "step current cost")
        best = current if best is None else _float(best, "step best cost")
        if type(accepted) is not bool:
            raise _Bad("step accepted must be a boolean")
        event = StepEvent(chain, _int(it, "step iteration", 1),
                          _float(elapsed, "step elapsed", True), op,
                          dec.config(op, cfg, "step config"), proposed, current, best, accepted,
                          _int(memory, "step memory"))
        log.steps.append(event)
        h = hist.setdefault(chain, [])
        _supersede(h, event.iteration, inclusive=True)
        h.append(("s", event))
        log.final = None
    elif tag == _TAG_RESTART:
        if len(rec) != 3:
            raise _Bad(f"a restart record has 3 fields, found {len(rec)}")
        chain, it = _int(rec[1], "restart chain"), _int(rec[2], "restart iteration")
        log.restarts.append((chain, it))
        h = hist.setdefault(chain, [])
        _supersede(h, it, inclusive=False)
        h.append(("r", it))
        log.final = None
    elif tag == _TAG_CHECKPOINT:
        if len(rec) != 10:
            raise _Bad(f"a checkpoint record has 10 fields, found {len(rec)}")
        cp = Checkpoint(chain=_int(rec[1], "checkpoint chain"),
                        iteration=_int(rec[2], "checkpoint iteration"),
                        elapsed=_float(rec[3], "checkpoint elapsed", True),
                        current=dec.strategy(rec[4], "checkpoint current strategy"),
                        current_cost=_float(rec[5], "checkpoint current cost"),
                        best=dec.strategy(rec[6], "checkpoint best strategy"),
                        best_cost=_float(rec[7], "checkpoint best cost"),
                        rng_state=_rng_state(rec[8]))
        frontier = dec.frontier(rec[9], "checkpoint frontier")
        log.checkpoints.append(cp)
        log.frontiers.append(frontier)
        h = hist.setdefault(cp.chain, [])
        _supersede(h, cp.iteration, inclusive=False)
        h.append(("c", cp))
        log.final = None
    elif tag == _TAG_FINAL:
        if len(rec) != 8:
            raise _Bad(f"a final record has 8 fields, found {len(rec)}")
        reason = _str(rec[1], "final reason")
        if reason not in REASONS:
            raise _Bad(f"final reason {reason!r:.40} is not one of {', '.join(REASONS)}")
        log.final = FinalRecord(reason=reason, iterations=_int(rec[2], "final iterations"),
                                elapsed=_float(rec[3], "final elapsed", True),
                                best_cost=_float(rec[4], "final best cost"),
                                best=dec.strategy(rec[5], "final best strategy"),
                                best_chain=_int(rec[6], "final best chain"),
                                frontier=dec.frontier(rec[7], "final frontier"))
    elif tag == _TAG_HEADER:
        raise _Bad("a second header record")
    else:
        raise _Bad(f"unknown record type {tag}")
