"""A fixed amount of work timed beside a benchmark's own, so a figure can be given as a
ratio to it: the machine is shared and its speed drifts from run to run, and a ratio to
work timed in the same run drifts less.

The reference is deterministic: sort a seeded list of 200,000 floats, then push and pop
them all through a heap (Python objects and a C loop over memory, as the simulator's
Python and C halves are). Its time is the best of five runs.
"""

from __future__ import annotations

import heapq
import random
import time

REFERENCE_ITEMS = 200_000


def reference_s(repeats: int = 5) -> float:
    """Seconds the fixed reference work takes here now (best of ``repeats``)."""
    rng = random.Random(7)
    values = [rng.random() for _ in range(REFERENCE_ITEMS)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        heap = sorted(values, reverse=True)
        heapq.heapify(heap)
        while heap:
            heapq.heappop(heap)
        best = min(best, time.perf_counter() - start)
    return best
