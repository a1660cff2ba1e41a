"""Playing a saved search back: ``Playback`` feeds a log's records into a
``SearchWatch`` in the order the search made them, on a clock the caller advances
(real time times a speed), so a display shows the search as it ran. It needs only the
log: the model, cluster and cost model identity are in its header.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flextui.search.events import RestartEvent
from flextui.search.log import SearchLog
from flextui.session.jobs import JobState
from flextui.session.search_watch import SearchView, SearchWatch

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 200.0)


@dataclass(frozen=True, slots=True)
class _Record:
    elapsed: float      # the chain's clock when it made the record
    chain: int
    order: int          # position in the chain's history
    kind: str           # "s" step, "r" restart, "c" checkpoint
    obj: Any


def _timed_records(log: SearchLog) -> list[_Record]:
    """Every chain's records merged by elapsed time (a restart takes the time of the
    record before it), each chain's kept in order."""
    per_chain = []
    for chain in log.chains():
        records, clock = [], 0.0
        for order, (kind, obj) in enumerate(log.records_of(chain)):
            if kind == "r":
                obj = RestartEvent(chain, obj)
            else:
                clock = max(clock, obj.elapsed)
            records.append(_Record(clock, chain, order, kind, obj))
        per_chain.append(records)
    return list(heapq.merge(*per_chain, key=lambda r: (r.elapsed, r.chain, r.order)))


class Playback:
    """A saved search played back. ``advance(dt)`` moves the clock by ``dt`` wall
    seconds times ``speed`` while playing; ``step()`` plays exactly one more step."""

    def __init__(self, log: SearchLog) -> None:
        self.log = log
        self._options = log.header.options
        self._records = _timed_records(log)
        self.speed = 1.0
        self.baselines: dict[str, float] = {}
        self.rewind()

    def rewind(self) -> None:
        """Back to the start (the initial checkpoints, iteration 0), paused."""
        options = self._options
        self.watch = SearchWatch(self.log.header.graph, options.iterations,
                                 options.time_limit, options.chains)
        self._next = 0
        self.clock = 0.0
        self.playing = False
        self._feed(lambda r: r.kind != "s")

    @property
    def finished(self) -> bool:
        return self._next >= len(self._records)

    @property
    def duration(self) -> float:
        return self._records[-1].elapsed if self._records else 0.0

    def advance(self, dt: float) -> None:
        if not self.playing:
            return
        self.clock += dt * self.speed
        self._feed(lambda r: r.elapsed <= self.clock)
        if self.finished:
            self.playing = False

    def step(self) -> None:
        """Play up to and including the next step record, then pause."""
        self.playing = False
        seen = False

        def before_second_step(r: _Record) -> bool:
            nonlocal seen
            if r.kind == "s":
                if seen:
                    return False
                seen = True
            return True

        self._feed(before_second_step)
        self.clock = max(self.clock, self._records[self._next - 1].elapsed if self._next else 0.0)

    def to_end(self) -> None:
        self.playing = False
        self._feed(lambda r: True)
        self.clock = max(self.clock, self.duration)

    def toggle(self) -> bool:
        """Play or pause; True if playing now. Playing a finished log starts it over."""
        if self.finished and not self.playing:
            self.rewind()
        self.playing = not self.playing
        return self.playing

    def faster(self, up: bool) -> float:
        """The next speed up (or down) the ``SPEEDS`` ladder; the new speed."""
        if up:
            self.speed = min((v for v in SPEEDS if v > self.speed), default=SPEEDS[-1])
        else:
            self.speed = max((v for v in SPEEDS if v < self.speed), default=SPEEDS[0])
        return self.speed

    def view(self) -> SearchView:
        final = self.log.final
        if self.finished:
            state = JobState.FINISHED if final is not None else JobState.STOPPED
        else:
            state = JobState.RUNNING if self.playing else JobState.PAUSED
        reason = final.reason if final is not None and self.finished else None
        return self.watch.view(state, self.baselines, reason)

    def _feed(self, take: Callable[[_Record], bool]) -> None:
        steps = []
        while self._next < len(self._records) and take(self._records[self._next]):
            r = self._records[self._next]
            self._next += 1
            if r.kind == "s":
                steps.append(r.obj)
                continue
            self.watch.take(steps, r.elapsed)
            steps = []
            self.watch.reset(r.obj)
        self.watch.take(steps, self.clock if self.playing else None)
