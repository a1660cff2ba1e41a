"""A chain's start and its loop, the same in the search's process and in a worker:
where each chain starts (a strategy, or a resumed log's checkpoint), the step loop with
its stop rules and time budget, and the silent re-run that recovers a resumed chain's
random state."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from flextui.cost.model import CostModel
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.baselines import fastest_baseline
from flextui.search.events import StepEvent, StopReason
from flextui.search.log import Checkpoint, SearchLog
from flextui.search.mcmc import Chain, chain_seed
from flextui.search.options import INITS, SearchOptions
from flextui.search.pipeline import fitted
from flextui.strategy import Strategy, builtin_strategy, random_strategy
from flextui.strategy.pipeline import Pipeline

BATCH_S = 0.1        # how often a chain hands its events on
CHECKPOINT_S = 5.0   # how often a chain checkpoints into the log


def initial_strategy(init: str, graph: OpGraph, cluster: Cluster, options: SearchOptions,
                     chain: int, baselines: Callable[[], dict[str, float]]) -> Strategy:
    """A chain's starting point: a built-in strategy, a random one per chain, or with
    "auto" the faster of the baselines, data parallelism and the expert strategy (so a
    search never returns worse than both; ``baselines()`` gives their costs), as the
    search trains (``searched_as``)."""
    if init == "random":
        start = random_strategy(graph, cluster, seed=hash_seed(chain_seed(options.seed, chain)))
    elif init == "auto":
        start = builtin_strategy(fastest_baseline(baselines()), graph, cluster)
    else:
        start = builtin_strategy(init, graph, cluster)
    return searched_as(start, graph, options)


def searched_as(start: Strategy, graph: OpGraph, options: SearchOptions) -> Strategy:
    """``start`` in the search's precision and its first micro-batches (``fitted``)."""
    start = start.with_precision(options.precision)
    if options.microbatches == 1:
        return start
    return fitted(graph, start, Pipeline(options.microbatches, options.schedule))


def hash_seed(text: str) -> int:
    """A stable integer from a string (Python's ``hash`` of a str varies per process)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def drive(chain: Chain, options: SearchOptions, stopped: Callable[[], bool],
          emit: Callable[[list], None], held: Callable[[], bool] = lambda: False,
          on_hold: Callable[[bool], None] = lambda waiting: None) -> StopReason:
    """Step ``chain`` until a stop rule fires; hand events on in batches. Returns why it
    stopped. The last item emitted is always the chain's final checkpoint. While
    ``held()`` the chain waits, and the wait does not count towards its elapsed time:
    it hands on its pending events, then says ``on_hold(True)``, and ``on_hold(False)``
    when it goes on (so whoever holds it knows when no more events will come). A step
    still running when the time budget runs out is abandoned (not logged)."""
    pending: list = []
    last_emit = last_checkpoint = time.monotonic()
    by_time = options.iterations is None
    while True:
        if held() and not stopped():
            if pending:
                emit(pending)
                pending = []
            on_hold(True)
            _wait_while_held(chain, held, stopped)
            on_hold(False)
        if options.iterations is not None and chain.iteration >= options.iterations:
            reason = StopReason.ITERATIONS
        elif options.time_limit is not None and chain.elapsed >= options.time_limit:
            reason = StopReason.TIME
        elif chain.converged(by_time):
            reason = StopReason.CONVERGED
        elif stopped():
            reason = StopReason.INTERRUPTED
        else:
            try:
                step = chain.step(_deadline(chain, options))
            except TimeoutError:   # the budget ran out in the middle of a step
                reason = StopReason.TIME
            else:
                pending.append(step)
                if chain.restart_due():
                    pending.append(chain.restart())
                now = time.monotonic()
                if now - last_checkpoint >= CHECKPOINT_S:
                    pending.append((chain.checkpoint(), chain.frontier_points()))
                    last_checkpoint = now
                if now - last_emit >= BATCH_S:
                    emit(pending)
                    pending, last_emit = [], now
                continue
        pending.append((chain.checkpoint(), chain.frontier_points()))
        emit(pending)
        return reason


def _deadline(chain: Chain, options: SearchOptions) -> float:
    """When (``time.monotonic()``) the chain's time budget runs out: a step still
    running then is abandoned, so a search keeps its budget however long a step takes."""
    if options.time_limit is None:
        return math.inf
    return time.monotonic() + options.time_limit - chain.elapsed


def _wait_while_held(chain: Chain, held: Callable[[], bool], stopped: Callable[[], bool]) -> None:
    elapsed = chain.elapsed
    while held() and not stopped():
        time.sleep(0.05)
    chain.set_elapsed(elapsed)


def catch_up(chain: Chain, last: StepEvent | None, where: str) -> None:
    """Re-run, without reporting, the steps logged beyond the chain's checkpoint, up to
    ``last`` (the chain's last logged step), and check the last one matches."""
    if last is None or last.iteration <= chain.iteration:
        return
    while chain.iteration < last.iteration:
        event = chain.step()
        if chain.restart_due():
            chain.restart()
    if (event.changes, event.stages, event.pipeline, event.proposed) != \
            (last.changes, last.stages, last.pipeline, last.proposed):
        raise FlextuiError(f"{where}: resuming chain {chain.index} did not reproduce its "
                           f"logged step {last.iteration}; the log was written with a "
                           "different cost model or flextui version")
    chain.set_elapsed(last.elapsed)


@dataclass
class ChainStart:
    """Where a chain starts: a strategy (a new search), or a checkpoint plus the last
    step logged after it (a resumed one)."""

    index: int
    strategy: Strategy | None = None
    checkpoint: Checkpoint | None = None
    initial: Strategy | None = None    # resumed: the chain's initial strategy
    initial_cost: float = 0.0
    last_step: StepEvent | None = None
    where: str = ""
    #: when (``time.monotonic()``) the search started: a new chain's clock starts there,
    #: so the setup (initial simulations, a worker's start) counts towards its budget
    search_started: float | None = None

    def chain(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
              options: SearchOptions) -> Chain:
        if self.checkpoint is None:
            assert self.strategy is not None  # a chain starts from a strategy or a checkpoint
            chain = Chain(self.index, graph, cluster, cost_model, options, self.strategy)
            if self.search_started is not None:
                chain.set_elapsed(time.monotonic() - self.search_started)
            return chain
        assert self.initial is not None   # a resumed chain's first checkpoint holds it
        chain = Chain.from_checkpoint(self.checkpoint, graph, cluster, cost_model, options,
                                      self.initial, self.initial_cost)
        catch_up(chain, self.last_step, self.where)
        return chain


def chain_starts(options: SearchOptions, graph: OpGraph, cluster: Cluster,
                 initial: Strategy | None, resume: SearchLog | None,
                 baselines: Callable[[], dict[str, float]]) -> list[ChainStart]:
    """Where each chain starts. Resuming, a chain goes on from its last checkpoint; one
    that never reached its first (the search was killed while it set up) starts over as
    it first did, which needs its initial strategy to be one flextui can rebuild.
    ``baselines()`` gives the baselines' costs, for ``--init auto``."""
    starts = []
    for c in range(options.chains):
        first = next((cp for cp in resume.checkpoints if cp.chain == c), None) if resume \
            else None
        if resume is None or first is None:
            starts.append(ChainStart(c, searched_as(initial, graph, options)
                                     if initial is not None else
                                     _rebuilt_initial(options, graph, cluster, c, resume,
                                                      baselines)))
            continue
        steps = resume.steps_of(c)
        starts.append(ChainStart(c, None, resume.last_checkpoint(c), first.current,
                                 first.current_cost, steps[-1] if steps else None,
                                 str(resume.path)))
    return starts


def _rebuilt_initial(options: SearchOptions, graph: OpGraph, cluster: Cluster, chain: int,
                     resume: SearchLog | None, baselines: Callable[[], dict[str, float]]
                     ) -> Strategy:
    if resume is not None and options.init not in INITS:
        raise FlextuiError(f"{resume.path}: chain {chain} was stopped before its first "
                           f"checkpoint, and its initial strategy ({options.init!r:.80}, a "
                           "file) is not in the log; start a new search with --init and "
                           "that file")
    return initial_strategy(options.init, graph, cluster, options, chain, baselines)
