"""Search logs (``.ffsearch``): written as a search runs (``logwriter``), read back
for replay and resume (``read_search_log`` -> ``SearchLog``). The format is in
``logformat``; locking, appending and scanning the frames of the file in ``logfile``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flextui.documents import BadDocument, unpack
from flextui.errors import SearchLogError
from flextui.graph import OpGraph
from flextui.limits import read_file
from flextui.search.events import StepEvent, StopReason
from flextui.search.logfile import scan_frames
from flextui.search.logformat import (
    FORMAT_VERSION,
    MAGIC,
    TAG_CHECKPOINT,
    TAG_FINAL,
    TAG_HEADER,
    TAG_RESTART,
    TAG_STEP,
    BadRecord,
    Checkpoint,
    Decoder,
    FinalRecord,
    FrontierPoint,
    SearchHeader,
    as_cost,
    as_int,
    as_list,
    as_str,
    as_time,
    decode_header,
    rng_state,
)
from flextui.strategy import Strategy

__all__ = ["FORMAT_VERSION", "MAGIC", "Checkpoint", "FinalRecord", "FrontierPoint",
           "SearchHeader", "SearchLog", "read_search_log"]


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
    record_offsets: list[int] = field(default_factory=list)  # where each complete record
                                                             # starts
    # chain -> its effective records in order: ("s", StepEvent) | ("r", iteration)
    # | ("c", Checkpoint)
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
            for chain, _, kind, obj in sorted(items, key=lambda x: (x[0], x[1], rank[x[2]])):
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

    def records_of(self, chain: int) -> list[tuple[str, Any]]:
        """The chain's effective records in order: ("s", StepEvent), ("r", iteration of a
        restart) or ("c", Checkpoint)."""
        return list(self._history_of(chain))

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
        params = list(self.header.graph.parameters)
        current, shards = dict(cp.current), dict(cp.current.shards)
        pipeline = cp.current.pipeline
        best, best_shards, best_pipeline = (current, shards, pipeline) \
            if cp.best == cp.current else (dict(cp.best), dict(cp.best.shards), cp.best.pipeline)
        best_cost = cp.best_cost
        changed = False
        for kind, obj in hist[base + 1:]:
            if _iteration_of(kind, obj) > iteration:
                break
            if kind == "s":
                if obj.accepted:
                    if best is current:
                        current = dict(current)
                    if best_shards is shards:
                        shards = dict(shards)
                    for op, config in obj.changes:
                        current[ops[op].name] = config
                    shards.update((params[p], stage) for p, stage in obj.stages)
                    pipeline = obj.pipeline or pipeline
                    changed = True
                    if obj.proposed <= best_cost:
                        best, best_shards, best_cost = current, shards, obj.proposed
                        best_pipeline = pipeline
            elif kind == "r":
                current, shards, pipeline = best, best_shards, best_pipeline
                changed = True
        if not changed:
            return cp.current
        return Strategy(current, cp.current.name, shards, cp.current.precision, pipeline)

    @property
    def elapsed(self) -> float:
        """How long the logged search ran (seconds): its final record's time, else the
        latest time any chain recorded."""
        if self.final is not None:
            return self.final.elapsed
        return max([e.elapsed for e in self.steps] + [cp.elapsed for cp in self.checkpoints],
                   default=0.0)

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
            return step_strategy(self.header.graph, before, step), step.proposed
        return found


def step_strategy(graph: OpGraph, before: Strategy, step: StepEvent) -> Strategy:
    """The strategy ``step`` proposed, from the one before it."""
    after = before.replace_all({graph.ops[op].name: config for op, config in step.changes})
    if step.pipeline is not None:
        after = after.with_pipeline(step.pipeline)
    if not step.stages:
        return after
    params = list(graph.parameters)
    return after.with_shards({params[p]: stage for p, stage in step.stages})


def _op_index(value: Any, num_ops: int, what: str) -> int:
    index = as_int(value, what)
    if index >= num_ops:
        raise BadRecord(f"{what} index {index} is out of range (the graph has {num_ops} ops)")
    return index


def _iteration_of(kind: str, obj: Any) -> int:
    return obj if kind == "r" else obj.iteration


# -- reader ---------------------------------------------------------------------------


def read_search_log(path: str | Path) -> SearchLog:
    """Read and validate a ``.ffsearch`` file. A torn last record (a killed search) or a
    zero-filled tail (a machine that lost power) is reported with ``truncated=True``,
    every complete record before it read; anything else wrong raises SearchLogError."""
    path = Path(path)
    try:
        data = read_file(path, None)
    except OSError as exc:
        raise SearchLogError(f"cannot read search log {path}: {exc.strerror or exc}") from None
    if data[:len(MAGIC)] != MAGIC:
        why = " (it is empty)" if not data else ""
        raise SearchLogError(f"{path} is not a flextui search log{why}")

    frames = scan_frames(data, len(MAGIC), path)
    records: list[tuple[int, Any]] = []       # (offset, unpacked body)
    for n, (pos, body) in enumerate(frames.bodies):
        try:
            records.append((pos, unpack(body)))
        except BadDocument as bad:
            raise SearchLogError(f"{path}: record {n} at byte {pos} is malformed "
                                 f"({bad.problem})") from None
    truncated, complete, size = frames.truncated, frames.end, len(data)
    if not records:
        raise SearchLogError(f"{path}: the search log's header is "
                             f"{'truncated' if truncated else 'missing'}; the file cannot be read")

    try:
        header = decode_header(path, records[0][1])
    except BadRecord as exc:
        raise SearchLogError(f"{path}: record 0 (the header) at byte {len(MAGIC)}: {exc}") from None
    log = SearchLog(path=path, header=header, steps=[], restarts=[], checkpoints=[], frontiers=[],
                    final=None, truncated=truncated, complete_bytes=complete,
                    record_offsets=[offset for offset, _ in records], _size=size)
    dec = Decoder(header.graph, header.cluster, header.options.precision)
    num_ops = len(header.graph.ops)
    hist = log._history
    for n, (offset, rec) in enumerate(records[1:], start=1):
        try:
            if log.final is not None:   # a finished search is never resumed
                raise BadRecord(f"a record after the final record (record {n - 1}); the "
                                "search log was changed by hand or is damaged")
            _record(log, dec, num_ops, hist, rec)
        except BadRecord as exc:
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


def _record(log: SearchLog, dec: Decoder, num_ops: int, hist: dict, rec: Any) -> None:
    if type(rec) is not list or not rec or type(rec[0]) is not int:
        raise BadRecord("a record must be a list starting with its type tag")
    tag = rec[0]
    if tag == TAG_STEP:
        if len(rec) not in (11, 12, 13, 14, 15):
            raise BadRecord(f"a step record has 11 to 15 fields, found {len(rec)}")
        if len(rec) == 13 and rec[12] is not True:
            raise BadRecord("a step record's 13th field (early-rejected) must be true")
        if len(rec) >= 14 and type(rec[12]) is not bool:
            raise BadRecord("a step record's 13th field (early-rejected) must be a boolean")
        _, chain, it, elapsed, op, cfg, proposed, current, best, accepted, memory = rec[:11]
        chain = as_int(chain, "step chain")
        op = _op_index(op, num_ops, "step op")
        others = []
        for k, pair in enumerate(as_list(rec[11], "step others") if len(rec) >= 12 else ()):
            o, c = as_list(pair, f"step others change {k}", 2)
            o = _op_index(o, num_ops, f"step others change {k} op")
            others.append((o, dec.config(o, c, f"step others change {k} config")))
        proposed = as_cost(proposed, "step proposed cost")
        current = proposed if current is None else as_cost(current, "step current cost")
        best = current if best is None else as_cost(best, "step best cost")
        if type(accepted) is not bool:
            raise BadRecord("step accepted must be a boolean")
        event = StepEvent(chain, as_int(it, "step iteration", 1),
                          as_time(elapsed, "step elapsed"), op,
                          dec.config(op, cfg, "step config"), proposed, current, best, accepted,
                          as_int(memory, "step memory"), tuple(others),
                          len(rec) >= 13 and rec[12],
                          tuple(dec.stages(rec[13], "step")) if len(rec) >= 14 else (),
                          dec.pipeline(rec[14], "step") if len(rec) == 15 else None)
        log.steps.append(event)
        h = hist.setdefault(chain, [])
        _supersede(h, event.iteration, inclusive=True)
        h.append(("s", event))
    elif tag == TAG_RESTART:
        if len(rec) != 3:
            raise BadRecord(f"a restart record has 3 fields, found {len(rec)}")
        chain, it = as_int(rec[1], "restart chain"), as_int(rec[2], "restart iteration")
        log.restarts.append((chain, it))
        h = hist.setdefault(chain, [])
        _supersede(h, it, inclusive=False)
        h.append(("r", it))
    elif tag == TAG_CHECKPOINT:
        if len(rec) != 10:
            raise BadRecord(f"a checkpoint record has 10 fields, found {len(rec)}")
        cp = Checkpoint(chain=as_int(rec[1], "checkpoint chain"),
                        iteration=as_int(rec[2], "checkpoint iteration"),
                        elapsed=as_time(rec[3], "checkpoint elapsed"),
                        current=dec.strategy(rec[4], "checkpoint current strategy"),
                        current_cost=as_cost(rec[5], "checkpoint current cost"),
                        best=dec.strategy(rec[6], "checkpoint best strategy"),
                        best_cost=as_cost(rec[7], "checkpoint best cost"),
                        rng_state=rng_state(rec[8]))
        frontier = dec.frontier(rec[9], "checkpoint frontier")
        log.checkpoints.append(cp)
        log.frontiers.append(frontier)
        h = hist.setdefault(cp.chain, [])
        _supersede(h, cp.iteration, inclusive=False)
        h.append(("c", cp))
    elif tag == TAG_FINAL:
        if len(rec) != 8:
            raise BadRecord(f"a final record has 8 fields, found {len(rec)}")
        try:
            reason = StopReason(as_str(rec[1], "final reason"))
        except ValueError:
            raise BadRecord(f"final reason {rec[1]!r:.40} is not one of "
                            f"{', '.join(StopReason)}") from None
        log.final = FinalRecord(reason=reason, iterations=as_int(rec[2], "final iterations"),
                                elapsed=as_time(rec[3], "final elapsed"),
                                best_cost=as_cost(rec[4], "final best cost"),
                                best=dec.strategy(rec[5], "final best strategy"),
                                best_chain=as_int(rec[6], "final best chain"),
                                frontier=dec.frontier(rec[7], "final frontier"))
    elif tag == TAG_HEADER:
        raise BadRecord("a second header record")
    else:
        raise BadRecord(f"unknown record type {tag}")
