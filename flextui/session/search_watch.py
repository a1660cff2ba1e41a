"""What a display of a search needs, kept bounded: the accumulator behind the app's
Search screen, fed by a running search (``live``) or by a saved log (``playback``).

A ``SearchWatch`` takes the steps and resets (checkpoints, restarts) of every chain in
order, tracks each chain's current and best strategies by applying the steps' changes,
and keeps a cost history that halves its resolution whenever it fills (so memory stays
bounded however long the search runs). ``view()`` returns a ``SearchView``: plain,
immutable data a widget can draw without touching the search.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from flextui.graph import OpGraph
from flextui.search.events import RestartEvent, StepEvent
from flextui.search.frontier import Frontier
from flextui.search.log import step_strategy
from flextui.search.logformat import Checkpoint
from flextui.session.jobs import JobState
from flextui.strategy import Strategy

HISTORY_POINTS = 512   # at most this many points kept for the cost plot
RATE_WINDOW_S = 2.0    # simulations per second are measured over this much recent time


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    step: int          # steps made by all chains so far
    elapsed: float     # seconds (the search's own clock: pauses excluded)
    best: float        # best cost over all chains (s)
    current: float     # current cost of the chain that made the step (s)


class CostHistory:
    """The first point, every ``stride``-th step's point, and the last, at most
    ``capacity`` + 2 of them: when full, the stride doubles and the points off it go."""

    def __init__(self, capacity: int = HISTORY_POINTS) -> None:
        if capacity < 2:
            raise ValueError("a cost history needs room for at least 2 points")
        self.capacity, self.stride = capacity, 1
        self._first: HistoryPoint | None = None
        self._points: list[HistoryPoint] = []
        self._last: HistoryPoint | None = None

    def add(self, point: HistoryPoint) -> None:
        if self._first is None:
            self._first = point
        self._last = point
        if point.step % self.stride:
            return
        self._points.append(point)
        if len(self._points) > self.capacity:
            self.stride *= 2
            self._points = [p for p in self._points if p.step % self.stride == 0]

    def points(self) -> tuple[HistoryPoint, ...]:
        ends = [p for p in (self._first, self._last) if p is not None]
        return tuple(sorted({p.step: p for p in (*self._points, *ends)}.values(),
                            key=lambda p: p.step))


@dataclass(frozen=True)
class SearchView:
    """One frame of a search, for display."""

    state: JobState
    steps: int                       # over all chains
    elapsed: float                   # seconds, the longest chain's
    progress: float | None           # fraction of the budget used, if there is a budget
    initial_cost: float | None
    best_cost: float | None
    current_cost: float | None
    acceptance_rate: float
    sims_per_s: float
    history: tuple[HistoryPoint, ...]
    best: Strategy | None            # the best strategy over all chains
    best_chain: int | None
    best_version: int                # grows each time ``best`` changes
    frontier: tuple[tuple[float, int], ...]   # (time s, memory bytes), by memory ascending
    baselines: dict[str, float] = field(default_factory=dict)  # data-parallel, expert
    reason: str | None = None        # why the search ended
    message: str | None = None       # what went wrong, when it failed

    def speedup_over(self, baseline: str) -> float | None:
        cost = self.baselines.get(baseline)
        if cost is None or not self.best_cost:
            return None
        return cost / self.best_cost


class SearchWatch:
    """Accumulates a search's events (one thread feeds it; see ``live`` for locking)."""

    def __init__(self, graph: OpGraph, iterations: int | None = None,
                 time_limit: float | None = None, chains: int = 1,
                 history: int = HISTORY_POINTS) -> None:
        self._graph = graph
        self._budget = (iterations * chains if iterations else None, time_limit)
        self.history = CostHistory(history)
        self.frontier = Frontier()
        self.current: dict[int, Strategy] = {}
        self.best: dict[int, tuple[float, Strategy]] = {}
        self.initial: dict[int, float] = {}
        self.steps = self.accepted = self.best_version = 0
        self.elapsed = 0.0
        self.current_cost: float | None = None
        self._best_chain: int | None = None
        self._rate: deque[tuple[float, int]] = deque()

    # -- feeding ------------------------------------------------------------------------

    def reset(self, item: Checkpoint | RestartEvent) -> None:
        if isinstance(item, RestartEvent):
            self.current[item.chain] = self.best[item.chain][1]
            return
        self.initial.setdefault(item.chain, item.current_cost)
        self.current[item.chain] = item.current
        self.current_cost = item.current_cost
        self._offer_best(item.chain, item.best_cost, item.best)

    def take(self, steps: list[StepEvent], now: float | None = None) -> None:
        for e in steps:
            self.steps += 1
            self.accepted += e.accepted
            self.elapsed = max(self.elapsed, e.elapsed)
            self.current_cost = e.current
            if not e.early:   # an early-rejected step's cost is only a lower bound
                self.frontier.add(e.proposed, e.memory)
            if e.accepted and e.chain in self.current:
                self.current[e.chain] = step_strategy(self._graph, self.current[e.chain], e)
                if e.best == e.current:
                    self._offer_best(e.chain, e.best, self.current[e.chain])
            self.history.add(HistoryPoint(self.steps, e.elapsed, self.best_cost or e.best,
                                          e.current))
        if now is not None:
            self._rate.append((now, self.steps))
            while len(self._rate) > 2 and now - self._rate[1][0] >= RATE_WINDOW_S:
                self._rate.popleft()

    def _offer_best(self, chain: int, cost: float, strategy: Strategy) -> None:
        """The chain's best is now ``strategy`` (a chain takes ties, as ``Chain`` does);
        it leads if it beats the leader, or is the leader; between chains a tie goes to
        the lower chain, as the search's result does (whichever chain's steps came in
        first)."""
        if self.best.get(chain) == (cost, strategy):
            return
        self.best[chain] = (cost, strategy)
        leader = self._best_chain
        if leader == chain or leader is None or (cost, chain) < (self.best[leader][0], leader):
            self._best_chain = chain
            self.best_version += 1

    # -- reading ------------------------------------------------------------------------

    @property
    def best_chain(self) -> int | None:
        return self._best_chain

    @property
    def best_cost(self) -> float | None:
        return self.best[self._best_chain][0] if self._best_chain is not None else None

    def sims_per_s(self) -> float:
        if len(self._rate) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._rate[0], self._rate[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def progress(self) -> float | None:
        steps, seconds = self._budget
        parts = [self.steps / steps if steps else None, self.elapsed / seconds if seconds else None]
        known = [p for p in parts if p is not None]
        return min(1.0, max(known)) if known else None

    def view(self, state: JobState, baselines: dict[str, float] | None = None,
             reason: str | None = None, message: str | None = None) -> SearchView:
        leader = self._best_chain
        initial = min(self.initial.values()) if self.initial else None
        return SearchView(
            state=state, steps=self.steps, elapsed=self.elapsed,
            progress=1.0 if state == JobState.FINISHED else self.progress(),
            initial_cost=initial, best_cost=self.best_cost, current_cost=self.current_cost,
            acceptance_rate=self.accepted / self.steps if self.steps else 0.0,
            sims_per_s=self.sims_per_s(), history=self.history.points(),
            best=self.best[leader][1] if leader is not None else None, best_chain=leader,
            best_version=self.best_version,
            frontier=tuple((p.time, p.memory) for p in self.frontier.points
                           if math.isfinite(p.time)),
            baselines=dict(baselines or {}), reason=reason, message=message)
