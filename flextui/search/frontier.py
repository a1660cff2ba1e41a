"""The time/memory frontier: the Pareto set of the strategies a search simulated
(TensorOpt's "reduce", Algorithm 1, kept incrementally).

A point ``(time, memory, item)`` is on the frontier when no other point is at least as
fast *and* at least as small. The frontier is kept sorted by memory ascending, which
makes time strictly descending: each point is the fastest one within its memory.

``add`` is a binary search on the memory-sorted list plus the removal of the points the
new one dominates (each point is removed at most once, so a stream of ``n`` additions
does ``O(n log n)`` comparisons; list insertion itself moves ``O(n)`` pointers).

The payload ``item`` is opaque here (the search stores a Strategy), so this module
imports nothing from the rest of flextui.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Point:
    time: float      # seconds (simulated iteration time, or cost)
    memory: int      # bytes (peak per-device memory)
    item: Any = None


class Frontier:
    """The Pareto set of ``(time, memory)`` points, smaller being better in both."""

    def __init__(self, points: Iterable[tuple[float, int, Any] | Point] = ()) -> None:
        self._memory: list[int] = []
        self._time: list[float] = []
        self._items: list[Any] = []
        for p in points:
            self.add(*((p.time, p.memory, p.item) if isinstance(p, Point) else p))

    def add(self, time: float, memory: int, item: Any = None) -> bool:
        """Offer a point; True if it is on the frontier now. A point that an existing
        one dominates or equals (no slower and no larger) is not added; the points the
        new one dominates are removed."""
        if math.isnan(time):
            raise ValueError("a frontier point's time cannot be NaN")
        mems, times = self._memory, self._time
        i = bisect_right(mems, memory)  # points before i have memory <= this one's
        if i and times[i - 1] <= time:  # the fastest of them is at least as fast
            return False
        j = bisect_left(mems, memory)   # points from j on have memory >= this one's
        end = j
        while end < len(mems) and times[end] >= time:  # times fall, so they lead the tail
            end += 1
        mems[j:end] = [memory]
        times[j:end] = [time]
        self._items[j:end] = [item]
        return True

    def merge(self, other: Frontier | Iterable[tuple[float, int, Any] | Point]) -> int:
        """Offer every point of ``other`` (another frontier, e.g. another chain's);
        return how many of them are on this frontier afterwards."""
        pts = other.points if isinstance(other, Frontier) else \
            [p if isinstance(p, Point) else Point(*p) for p in other]
        added = [p for p in pts if self.add(p.time, p.memory, p.item)]
        kept = set(zip(self._time, self._memory))
        return sum(1 for p in added if (p.time, p.memory) in kept)

    @property
    def points(self) -> list[Point]:
        """The frontier, by memory ascending (so by time descending)."""
        return [Point(t, m, x) for t, m, x in zip(self._time, self._memory, self._items)]

    def fastest_within(self, budget_bytes: float) -> Point | None:
        """The fastest point whose memory is at most ``budget_bytes``, or None."""
        i = bisect_right(self._memory, budget_bytes)
        if not i:
            return None
        return Point(self._time[i - 1], self._memory[i - 1], self._items[i - 1])

    def fastest(self) -> Point | None:
        return self.fastest_within(math.inf) if self._memory else None

    def smallest(self) -> Point | None:
        return Point(self._time[0], self._memory[0], self._items[0]) if self._memory else None

    def __len__(self) -> int:
        return len(self._memory)

    def __iter__(self) -> Iterator[Point]:
        return iter(self.points)

    def __repr__(self) -> str:
        return f"Frontier({len(self)} points)"
