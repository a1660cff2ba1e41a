"""Running a search: one or more chains (in worker processes when there are several;
each runs ``chains.drive``), their events batched to subscribers and to the search log,
the search's result, resume.

Chains never share state; each is a deterministic function of the seed, its index and
the inputs, so with a budget in iterations the result is the same whether the chains
ran in one process or several, and whether the search ran at once or was killed and
resumed (a resumed chain re-runs, silently, the steps logged after its last checkpoint
to recover its random state).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flextui.cost import cost_model_from_identity
from flextui.cost.model import CostModel
from flextui.errors import FlextuiError, SearchLogError
from flextui.graph import OpGraph, graph_from_dict
from flextui.machine import Cluster
from flextui.search.baselines import baseline_costs
from flextui.search.chains import ChainStart, chain_starts, drive
from flextui.search.events import RestartEvent, StepEvent, StopReason
from flextui.search.frontier import Frontier
from flextui.search.log import (
    Checkpoint,
    FinalRecord,
    FrontierPoint,
    SearchHeader,
    SearchLog,
)
from flextui.search.logfile import LogWriteError
from flextui.search.logwriter import SearchLogWriter
from flextui.search.mcmc import Chain
from flextui.search.options import SearchOptions
from flextui.strategy import Strategy

PARENT_POLL_S = 0.2  # how often a worker checks that the process that started it lives

EventSink = Callable[[list[StepEvent]], None]
ResetSink = Callable[[Checkpoint | RestartEvent], None]
#: hears whether every running chain waits while held (``run_search``'s ``on_held``)
HeldSink = Callable[[bool], None]


class SearchLogFailed(SearchLogError):
    """The search log could not be written (a full disk, a file size limit), so the
    search stopped there. ``result`` is what it found; the log keeps every whole record
    written before the failure (it has no final record, so it can be resumed)."""

    def __init__(self, error: LogWriteError, result: SearchResult) -> None:
        super().__init__(f"{error}; the search stopped after {result.iterations:,} steps "
                         "(the log keeps every record written before)")
        self.result = result


@dataclass
class ChainSummary:
    chain: int
    iterations: int
    accepted: int
    initial_cost: float
    best_cost: float
    reason: StopReason
    best: Strategy = field(repr=False)


@dataclass
class SearchResult:
    best: Strategy
    best_cost: float
    best_chain: int
    reason: StopReason
    elapsed: float
    chains: list[ChainSummary]
    frontier: list[FrontierPoint]
    #: the baselines' simulated costs (``baselines``), where the search had them
    baselines: dict[str, float] | None = None

    @property
    def iterations(self) -> int:
        return sum(c.iterations for c in self.chains)

    @property
    def acceptance_rate(self) -> float:
        return sum(c.accepted for c in self.chains) / max(1, self.iterations)

    @property
    def initial_cost(self) -> float:
        return self.chains[0].initial_cost

    def fastest_within(self, memory_bytes: int) -> FrontierPoint | None:
        fitting = [p for p in self.frontier if p.memory <= memory_bytes]
        return min(fitting, key=lambda p: (p.time, p.memory), default=None)


# -- the search ---------------------------------------------------------------------------

class _Collector:
    """Receives every chain's batches (on the caller's thread): writes the log, keeps
    the merged frontier and each chain's last checkpoint, passes steps to ``on_events``."""

    def __init__(self, writer: SearchLogWriter | None, on_events: EventSink | None,
                 on_reset: ResetSink | None, frontier: Frontier, stop: threading.Event,
                 on_held: HeldSink | None = None) -> None:
        self.writer, self.frontier, self.stop = writer, frontier, stop
        self.on_events, self.on_reset, self.on_held = on_events, on_reset, on_held
        self.held: set[int] = set()      # chains waiting while held, their events handed on
        self.ended: set[int] = set()
        self.last: dict[int, Checkpoint] = {}
        self.accepted: dict[int, int] = {}
        self.initial_cost: dict[int, float] = {}
        self.log_error: LogWriteError | None = None

    def take(self, items: list) -> None:
        steps = []
        for item in items:
            if isinstance(item, StepEvent):
                steps.append(item)
                self.accepted[item.chain] = self.accepted.get(item.chain, 0) + item.accepted
                self.log(SearchLogWriter.step, item)
            elif isinstance(item, RestartEvent):
                steps = self._reset(steps, item)
                self.log(SearchLogWriter.restart, item.chain, item.iteration)
            else:
                checkpoint, points = item
                steps = self._reset(steps, checkpoint)
                self.last[checkpoint.chain] = checkpoint
                for p in points:
                    self.frontier.add(p.time, p.memory, p.strategy)
                if self.writer:
                    self.log(SearchLogWriter.checkpoint, checkpoint, self.frontier_points())
        self._hand_on(steps)

    def log(self, write: Callable[..., None], *record) -> None:
        """Add a record to the log. When the disk refuses it, the log keeps what it has,
        is written no more, and the search is stopped (its result is still returned)."""
        if self.writer is None:
            return
        try:
            write(self.writer, *record)
        except LogWriteError as exc:
            self.log_error, self.writer = exc, None
            self.stop.set()

    def _reset(self, steps: list[StepEvent], item: Checkpoint | RestartEvent) -> list[StepEvent]:
        """Hand ``item`` to ``on_reset`` after the steps before it; the steps left."""
        if not self.on_reset:
            return steps
        self._hand_on(steps)
        self.on_reset(item)
        return []

    def _hand_on(self, steps: list[StepEvent]) -> None:
        if steps and self.on_events:
            self.on_events(steps)

    def hold(self, chain: int, waiting: bool) -> None:
        """Chain ``chain`` waits while held (every event it made handed on) or goes on;
        ``on_held`` hears whether every chain still running waits."""
        (self.held.add if waiting else self.held.discard)(chain)
        self._tell_held()

    def end(self, chain: int) -> None:
        self.ended.add(chain)
        self._tell_held()

    def _tell_held(self) -> None:
        running = set(self.initial_cost) - self.ended
        if self.on_held:
            self.on_held(bool(running) and running <= self.held)

    def started(self, chain: int, initial_cost: float, items: list) -> None:
        """Chain ``chain`` is running; ``items`` is its first checkpoint if it is new."""
        self.initial_cost[chain] = initial_cost
        self.take(items)

    def frontier_points(self) -> list[FrontierPoint]:
        return [FrontierPoint(p.time, p.memory, p.item) for p in self.frontier.points]


def run_search(graph: OpGraph, cluster: Cluster, cost_model: CostModel,
               options: SearchOptions, *, initial: Strategy | None = None,
               log_path: str | Path | None = None, resume: SearchLog | None = None,
               on_events: EventSink | None = None,
               on_reset: ResetSink | None = None,
               stop: threading.Event | None = None, pause: threading.Event | None = None,
               on_held: HeldSink | None = None, processes: bool | None = None,
               baselines: dict[str, float] | None = None) -> SearchResult:
    """Run ``options.chains`` chains to their stop rules (or until ``stop`` is set) and
    return the best strategy found. ``initial`` overrides ``options.init``.
    ``baselines`` are the ``baseline_costs`` of these inputs where the caller has them
    already; otherwise they are simulated once if ``--init auto`` needs them, and the
    result carries them either way (its summary then needs no more simulations). With
    ``log_path`` the search is logged there; with ``resume`` (a log read back) it goes
    on from that log's checkpoints, appending to it.

    ``on_events`` gets the steps in batches and ``on_reset`` what sets a chain's
    strategies outright (its checkpoints, the first at iteration 0, and its restarts),
    in the order the chain made them. While ``pause`` is set the chains wait; ``on_held``
    hears True once every chain waits, each having handed on every event it made (no
    more come until they go on), and False when one goes on. Chains run in
    worker processes when there are several or ``processes`` is true (an app keeps its own
    thread free)."""
    if cluster.num_devices < 2 and not (options.training and options.recompute):
        raise FlextuiError(f"cluster {cluster.name!r} has one device: every op has only one "
                           "split and recomputation is off, so there is nothing to search; "
                           "choose a cluster with at least two devices (flextui simulate "
                           "times this one)")
    stop = stop or threading.Event()
    pause = pause or threading.Event()
    sim_cluster = (cluster.with_memory_limit(options.memory_budget) if options.memory_budget
                   else cluster)
    frontier = Frontier()
    writer = None
    if resume is not None:
        for p in (resume.frontiers[-1] if resume.frontiers else []):
            frontier.add(p.time, p.memory, p.strategy)
        writer = SearchLogWriter.resume(resume)
    elif log_path is not None:
        header = SearchHeader(graph, cluster, cost_model.identity, options.seed, options)
        writer = SearchLogWriter(log_path, header)
    collector = _Collector(writer, on_events, on_reset, frontier, stop, on_held)
    if resume is not None:
        for step in resume.steps:
            collector.accepted[step.chain] = collector.accepted.get(step.chain, 0) + step.accepted
    # a resumed search's time counts what the log already ran
    started = time.monotonic() - (resume.elapsed if resume is not None else 0.0)
    known = dict(baselines or {})

    def costs() -> dict[str, float]:
        if not known:
            known.update(baseline_costs(graph, cluster, cost_model, options))
        return known
    try:
        starts = chain_starts(options, graph, sim_cluster, initial, resume, costs)
        for start in starts:
            start.search_started = started
        if options.chains == 1 and not processes:
            reasons = [_run_here(starts[0], graph, sim_cluster, cost_model, options, stop,
                                 pause, collector)]
        else:
            reasons = _run_workers(starts, graph, sim_cluster, cost_model, options, stop,
                                   pause, collector)
        result = _result(collector, reasons, time.monotonic() - started)
        result.baselines = known or None
        collector.log(SearchLogWriter.final, FinalRecord(
            result.reason, result.iterations, result.elapsed, result.best_cost, result.best,
            result.best_chain, result.frontier))
    finally:
        if writer:
            writer.close()
    if collector.log_error is not None:
        raise SearchLogFailed(collector.log_error, result)
    return result


def _run_here(start: ChainStart, graph, cluster, cost_model, options, stop, pause,
              collector) -> StopReason:
    chain = start.chain(graph, cluster, cost_model, options)
    collector.started(chain.index, chain.initial_cost, _first_items(start, chain))
    return drive(chain, options, stop.is_set, collector.take, pause.is_set,
                 lambda waiting: collector.hold(chain.index, waiting))


def _run_workers(starts, graph, cluster, cost_model, options, stop, pause,
                 collector) -> list[StopReason]:
    """One process per chain; this thread collects their batches until all are done."""
    identity = cost_model.identity
    cost_model_from_identity(identity)  # fail here, not in a worker
    context = multiprocessing.get_context("spawn")
    inbox = context.Queue()
    halt, hold = context.Event(), context.Event()
    args = (graph.to_dict(), cluster.to_dict(), identity, options, inbox, halt, hold,
            os.getpid())
    workers = [context.Process(target=_worker, args=(start, *args), daemon=True)
               for start in starts]
    for w in workers:
        w.start()
    reasons: dict[int, StopReason] = {}
    try:
        while len(reasons) < len(workers):
            if stop.is_set():
                halt.set()
            if pause.is_set() != hold.is_set():
                (hold.set if pause.is_set() else hold.clear)()
            try:
                message = inbox.get(timeout=0.1)
            except queue.Empty:
                dead = [i for i, w in enumerate(workers) if not w.is_alive() and i not in reasons]
                if dead and inbox.empty():
                    raise FlextuiError(f"search worker for chain {dead[0]} died "
                                       f"(exit code {workers[dead[0]].exitcode})") from None
                continue
            kind, chain, payload = message
            if kind == "error":
                raise FlextuiError(payload)
            if kind == "started":
                collector.started(chain, *payload)
            elif kind == "batch":
                collector.take(payload)
            elif kind == "held":
                collector.hold(chain, payload)
            else:
                reasons[chain] = payload
                collector.end(chain)
    finally:
        halt.set()
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
    return [reasons[c] for c in sorted(reasons)]


def _worker(start: ChainStart, graph_data, cluster_data, identity, options, inbox, halt,
            hold, parent: int) -> None:
    """A worker process: rebuild the inputs from data, run one chain, post its batches.
    Ctrl-C goes to the whole process group; the parent decides when workers stop. SIGTERM
    or SIGHUP (a shell hung up sends it to the group, so the parent has it too) end the
    chain as a halt does, its last batch posted; a worker whose parent has died ends at
    once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asked_to_end = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: asked_to_end.set())
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        graph, cluster = graph_from_dict(graph_data), Cluster.from_dict(cluster_data)
        chain = start.chain(graph, cluster, cost_model_from_identity(identity), options)
        inbox.put(("started", chain.index, (chain.initial_cost, _first_items(start, chain))))

        def stopped() -> bool:
            return halt.is_set() or asked_to_end.is_set()
        reason = drive(chain, options, stopped,
                       lambda items: inbox.put(("batch", chain.index, items)), hold.is_set,
                       lambda waiting: inbox.put(("held", chain.index, waiting)))
        inbox.put(("done", chain.index, reason))
    except FlextuiError as exc:
        inbox.put(("error", start.index, str(exc)))


def _exit_with_parent(parent: int) -> None:
    """A worker's watchdog: end the worker as soon as ``parent`` (which reads its batches
    and writes the log) is gone, even in the middle of a step. Exiting normally could
    block for ever: the inbox's feeder thread waits to write into a full pipe that no
    process reads any more."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _first_items(start: ChainStart, chain: Chain) -> list:
    """A new chain's iteration-0 checkpoint (a resumed one has it in its log already)."""
    return [(chain.checkpoint(), chain.frontier_points())] if start.checkpoint is None else []


def _result(collector: _Collector, reasons: list[StopReason], elapsed: float) -> SearchResult:
    chains = []
    for index, reason in enumerate(reasons):
        cp = collector.last[index]
        chains.append(ChainSummary(index, cp.iteration, collector.accepted.get(index, 0),
                                   collector.initial_cost[index], cp.best_cost, reason, cp.best))
    best = min(chains, key=lambda c: (c.best_cost, c.chain))
    reason = min(set(reasons), key=list(StopReason).index)
    return SearchResult(best.best, best.best_cost, best.chain, reason, elapsed, chains,
                        collector.frontier_points())
