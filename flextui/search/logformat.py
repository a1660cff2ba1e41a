"""The ``.ffsearch`` format: its records, how they are framed, and encoding and
decoding them with validation. ``log`` writes and reads whole files.
Search logs (``.ffsearch``): what a search did, written as it runs, read for replay/resume.

Layout. The file starts with the magic line ``b"FFSEARCH\\n"``, then a sequence of
*frames*, one per record::

    frame  = length:u32le  body_crc:u32le  head_crc:u16le  body[length]
    body   = msgpack array [tag, ...]  (never pickle)

``body_crc`` is the CRC-32 of ``body``; ``head_crc`` is a CRC-16 (CCITT) of the 8 bytes
before it, so a damaged length is caught as corruption instead of passing for a file cut
short. Every record is checked on its own. A frame cut off by the end of the file (the
search was killed mid-write), or damaged only by a zero-filled tail (see ``logfile``), is
not an error: the reader returns the complete records and says where they end, and
:meth:`SearchLogWriter.resume` cuts the torn tail off before appending.

Records (record 0 is always the header)::

    [0, {"version", "flextui", "created", "graph", "graph_hash", "cluster",
         "cluster_hash", "cost_model", "seed", "options"}]               header
    [1, chain, iteration, elapsed, op, config, proposed, current, best,
        accepted, memory(, others(, early(, stages(, pipeline))))]       step
    [2, chain, iteration]                                                restart
    [3, chain, iteration, elapsed, current, current_cost, best, best_cost,
        [rng_version, [rng ints...], gauss], frontier]                   checkpoint
    [4, reason, iterations, elapsed, best_cost, best, best_chain, frontier]  final

    config    = [[degree, ...], devices(, 1)]   devices: a start device (int) when the
                                           tasks run on start..start+n-1, else a list of
                                           ids; a final 1: the op is recomputed
    strategy  = [name, [config per op, in graph.ops order](, stages(, pipeline))]
    stages    = [[parameter index (graph.parameters order), shard stage], ...]
    pipeline  = [micro-batches, schedule name]
    frontier  = [[time_s, memory_bytes, strategy], ...]

``others`` (format v2), present only after a move that set more than one op (a
propagation or tied move) or before the early-rejected mark, lists the other ops it set
as ``[[op, config], ...]``. A ``true`` after it (format v3) marks a step rejected before
its simulation finished (``StepEvent.early``): its ``proposed`` cost is a lower bound.
A shard move (format v5) adds the early mark (true or false) and then the stages it
set; a strategy lists its sharded parameters' stages as a third item. A pipeline move
(format v6) adds, after the (maybe empty) stages, the micro-batches and schedule it
set; a strategy in micro-batches lists them as a fourth item. In a
step record ``current`` is nil when it equals ``proposed`` and ``best`` is nil when it
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
import random
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flextui import __version__
from flextui.cost.identity import check_identity
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError, SearchLogError
from flextui.fields import FieldReader
from flextui.graph import OpGraph
from flextui.graph.builder import graph_from_dict
from flextui.limits import nesting_problem
from flextui.machine import Cluster
from flextui.search.events import StopReason
from flextui.search.options import SearchOptions
from flextui.strategy import ParallelConfig, ShardStage, Strategy
from flextui.strategy.pipeline import Pipeline, Schedule, pipeline_refusal
from flextui.strategy.precision import Precision
from flextui.strategy.shards import stage_refusal

FORMAT_VERSION = 6  # v2: step records may set other ops than the picked one; v3: a
                    # step may be marked early-rejected; v4: a config may be recomputed;
                    # v5: a step may set parameters' shard stages, a strategy has them;
                    # v6: a step may set micro-batches, a strategy has them
#: the version rule (records are framed, not one document: the name is not stored)
SEARCH_LOG = DocumentFormat("ffsearch", FORMAT_VERSION, "search log", checksum=False)
MAGIC = b"FFSEARCH\n"

FRAME = struct.Struct("<IIH")
HEAD_CRC_INIT = 0xFFFF
TAG_HEADER, TAG_STEP, TAG_RESTART, TAG_CHECKPOINT, TAG_FINAL = range(5)


# -- records --------------------------------------------------------------------------


@dataclass
class SearchHeader:
    graph: OpGraph
    cluster: Cluster
    cost_model: str
    seed: int
    options: SearchOptions
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
    reason: StopReason
    iterations: int
    elapsed: float
    best_cost: float
    best: Strategy
    best_chain: int
    frontier: list[FrontierPoint]


# -- framing --------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    head = struct.pack("<II", len(body), zlib.crc32(body))
    return head + struct.pack("<H", binascii.crc_hqx(head, HEAD_CRC_INIT)) + body


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")



# -- encoding and decoding ---------------------------------------------------------


class Encoder:
    """Strategy/config encoding against one graph; configs are checked once and cached."""

    def __init__(self, graph: OpGraph, cluster: Cluster) -> None:
        self.ops = graph.ops
        self.num_devices = cluster.num_devices
        self.param_index = {name: i for i, name in enumerate(graph.parameters)}
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
            if config.recompute:
                enc.append(1)
            self._configs[key] = enc
        return enc

    def strategy(self, strategy: Strategy) -> list:
        try:
            configs = [self.config(i, strategy[op.name]) for i, op in enumerate(self.ops)]
        except KeyError as exc:
            raise SearchLogError(f"cannot log strategy {strategy.name!r}: it has no config for "
                                 f"op {exc.args[0]!r}") from None
        if not strategy.shards and not strategy.pipeline.on:
            return [strategy.name, configs]
        stages = sorted([self.param_index[name], int(stage)]
                        for name, stage in strategy.shards.items())
        if not strategy.pipeline.on:
            return [strategy.name, configs, stages]
        return [strategy.name, configs, stages, self.pipeline(strategy.pipeline)]

    def pipeline(self, pipeline: Pipeline) -> list:
        return [pipeline.microbatches, pipeline.schedule.value]

    def frontier(self, points: list[FrontierPoint]) -> list:
        return [[float(p.time), int(p.memory), self.strategy(p.strategy)] for p in points]


class BadRecord(Exception):
    """Malformed record content; the reader adds the file and record number."""


#: the checks of a record's fields; the reader adds the file and the record
RECORD = FieldReader(error=BadRecord)


def as_int(v: Any, what: str, lo: int | None = 0) -> int:
    return RECORD.integer(v, what, lo)


def as_cost(v: Any, what: str) -> float:
    """A simulated cost (seconds), never negative: infinite costs pass (a strategy
    rejected for its memory)."""
    return RECORD.number(v, what, 0.0, finite=False)


def as_time(v: Any, what: str) -> float:
    """Seconds a search has run: finite, never negative."""
    return RECORD.number(v, what, 0.0)


def as_str(v: Any, what: str) -> str:
    """A string of any length that is shown (a cost model's identity): no control
    characters."""
    return RECORD.string(v, what, limit=None, empty=True, raw=False)


def as_name(v: Any, what: str) -> str:
    """A string no longer than a name may be (it is shown to people)."""
    return RECORD.string(v, what, empty=True)


def as_list(v: Any, what: str, n: int | None = None) -> list:
    return RECORD.items(v, what, n)


class Decoder:
    def __init__(self, graph: OpGraph, cluster: Cluster,
                 precision: Precision = Precision.FP32) -> None:
        """``precision``: the search's (its options'), which every strategy it logs has."""
        self.precision = precision
        self.graph, self.ops = graph, graph.ops
        self.names = [op.name for op in graph.ops]
        self.params = list(graph.parameters)
        self.shared = graph.shared_parameters
        self.num_devices = cluster.num_devices
        self._configs: dict[tuple, ParallelConfig] = {}

    def config(self, index: int, data: Any, what: str) -> ParallelConfig:
        if type(data) is not list or len(data) not in (2, 3) or type(data[0]) is not list \
                or data[2:] not in ([], [1]):
            raise BadRecord(f"{what}: a config must be [degrees, devices] or [degrees, "
                            "devices, 1] (recomputed)")
        degrees, devices = data[:2]
        recompute = len(data) == 3
        key: tuple
        if not all(type(d) is int for d in degrees):
            raise BadRecord(f"{what}: op {self.names[index]!r}: degrees must be integers")
        if type(devices) is list:
            if not all(type(d) is int for d in devices):
                raise BadRecord(f"{what}: op {self.names[index]!r}: device ids must be integers")
            key = (index, tuple(degrees), tuple(devices), recompute)
        elif type(devices) is int:
            key = (index, tuple(degrees), devices, recompute)
        else:
            raise BadRecord(f"{what}: op {self.names[index]!r}: devices must be a start device "
                            "or a list of ids")
        config = self._configs.get(key)
        if config is not None:
            return config
        op = self.ops[index]
        if type(devices) is int:
            tasks = math.prod(degrees) if all(d >= 1 for d in degrees) else 0
            if not (tasks >= 1 and 0 <= devices and devices + tasks <= self.num_devices):
                raise BadRecord(f"{what}: op {op.name!r}: devices {devices}.. for degrees "
                                f"{degrees} do not fit the cluster's {self.num_devices} devices")
            devices = tuple(range(devices, devices + tasks))
        else:
            devices = tuple(devices)
        config = ParallelConfig(tuple(degrees), devices, recompute)
        try:
            config.check(op, self.num_devices)
        except FlextuiError as exc:
            raise BadRecord(f"{what}: the strategy does not fit the log's graph and cluster: "
                            f"{exc}") from None
        self._configs[key] = config
        return config

    def strategy(self, data: Any, what: str) -> Strategy:
        data = as_list(data, what)
        if len(data) not in (2, 3, 4):
            raise BadRecord(f"{what} must be [name, configs], [name, configs, stages] or "
                            f"[name, configs, stages, pipeline], found {len(data)} items")
        name = as_name(data[0], f"{what} name")
        configs = as_list(data[1], f"{what} configs")
        if len(configs) != len(self.ops):
            raise BadRecord(f"{what} has {len(configs)} op configs but the graph has "
                            f"{len(self.ops)} ops; it does not fit the log's graph")
        strategy = Strategy({self.names[i]: self.config(i, c, what)
                             for i, c in enumerate(configs)},
                            name, {self.params[p]: stage for p, stage in
                                   self.stages(data[2] if len(data) >= 3 else [], what)},
                            self.precision,
                            self.pipeline(data[3], what) if len(data) == 4 else None)
        refusal = pipeline_refusal(self.graph, strategy.configs_of(self.graph),
                                   strategy.pipeline)
        if refusal:
            raise BadRecord(f"{what}: the strategy does not fit the log's graph: {refusal}")
        return strategy

    def pipeline(self, data: Any, what: str) -> Pipeline:
        """``[micro-batches, schedule]``: a strategy's or a pipeline move's."""
        m, schedule = as_list(data, f"{what} pipeline", 2)
        return Pipeline(as_int(m, f"{what} micro-batches", 1),
                        Schedule(RECORD.choice(schedule, f"{what} schedule", tuple(Schedule))))

    def stages(self, data: Any, what: str) -> list[tuple[int, ShardStage]]:
        """``[[parameter index, stage], ...]``: the shard stages a step or strategy set."""
        out = []
        for k, pair in enumerate(as_list(data, f"{what} stages")):
            where = f"{what} stage {k}"
            p, stage = as_list(pair, where, 2)
            p, stage = as_int(p, f"{where} parameter"), as_int(stage, f"{where} stage")
            if p >= len(self.params):
                raise BadRecord(f"{where}: parameter {p} out of range; the graph has "
                                f"{len(self.params)}")
            if stage not in tuple(ShardStage):
                raise BadRecord(f"{where}: stage {stage} is not one of 0..3")
            refusal = stage_refusal(self.params[p], ShardStage(stage),
                                    self.params[p] in self.shared)
            if refusal:
                raise BadRecord(f"{where}: {refusal}")
            out.append((p, ShardStage(stage)))
        return out

    def frontier(self, data: Any, what: str) -> list[FrontierPoint]:
        points = []
        for k, p in enumerate(as_list(data, what)):
            p = as_list(p, f"{what} point {k}", 3)
            points.append(FrontierPoint(as_cost(p[0], f"{what} point {k} time"),
                                        as_int(p[1], f"{what} point {k} memory"),
                                        self.strategy(p[2], f"{what} point {k} strategy")))
        return points


def rng_state(data: Any) -> tuple:
    data = as_list(data, "rng state", 3)
    version, internal, gauss = data
    internal = as_list(internal, "rng state")
    if gauss is not None:
        gauss = RECORD.number(gauss, "rng gauss")
    state = (as_int(version, "rng version"), tuple(internal), gauss)
    try:
        random.Random().setstate(state)
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadRecord(f"rng state is not a valid random.Random state ({exc})") from None
    return state


def decode_header(path: Path, data: Any) -> SearchHeader:
    if type(data) is not list or len(data) != 2 or data[0] != TAG_HEADER \
            or type(data[1]) is not dict:
        raise BadRecord("the first record is not a search-log header")
    h = data[1]
    try:
        version = SEARCH_LOG.check_version(h.get("version"))
    except BadDocument as bad:
        if bad.newer_version:
            raise SearchLogError(f"{path}: {bad.problem}; upgrade flextui to read it") from None
        raise BadRecord(f"header: {bad.problem}") from None
    missing = [k for k in ("flextui", "created", "graph", "graph_hash", "cluster", "cluster_hash",
                           "cost_model", "seed", "options") if k not in h]
    if missing:
        raise BadRecord(f"header has no {', '.join(missing)}")
    nesting = nesting_problem(h)
    if nesting is not None:
        raise BadRecord(f"header: {nesting}")
    try:
        graph = graph_from_dict(h["graph"])
    except Exception as exc:  # noqa: BLE001 (untrusted data: whatever it raises, the file is bad)
        raise BadRecord(f"header graph cannot be rebuilt: {exc}") from None
    try:
        cluster = Cluster.from_dict(h["cluster"])
    except Exception as exc:  # noqa: BLE001
        raise BadRecord(f"header cluster cannot be rebuilt: {exc}") from None
    if graph.fingerprint != h["graph_hash"]:
        raise BadRecord(f"the header's model graph does not match its recorded hash "
                   f"({graph.fingerprint} != {h['graph_hash']!r:.40})")
    if cluster.fingerprint != h["cluster_hash"]:
        raise BadRecord(f"the header's cluster does not match its recorded hash "
                   f"({cluster.fingerprint} != {h['cluster_hash']!r:.40})")
    options = h["options"]
    if type(options) is not dict or not all(type(k) is str for k in options):
        raise BadRecord("header options must be a mapping with string keys")
    if version < 2:  # v1 searches made one-op proposals only
        options = {"propagation": 0.0, **options}
    options = {"tied": 0.0, **options}  # searches logged before tied moves made none
    cost_model = as_str(h["cost_model"], "header cost_model")
    try:
        decoded = SearchOptions.from_dict(options, "header")
        check_identity(cost_model)
    except FlextuiError as exc:
        raise BadRecord(f"{exc}; the search log was changed by hand or is damaged") from None
    return SearchHeader(graph=graph, cluster=cluster, cost_model=cost_model,
                        seed=as_int(h["seed"], "header seed", None), options=decoded,
                        flextui_version=as_name(h["flextui"], "header flextui version"),
                        created=as_name(h["created"], "header created"), version=version)
