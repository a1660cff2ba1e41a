"""The valid parallel configs of an op on a cluster (the search space, paper 4).

A config is a degree per parallel dim (each dividing the dim, product <= the device
count) and, as in FlexFlow, a contiguous block of devices ``start .. start+p-1``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from functools import lru_cache

from flextui.graph import Op
from flextui.strategy.config import ParallelConfig


def degree_choices(op: Op, num_devices: int) -> list[tuple[int, ...]]:
    """Every degree tuple of ``op`` whose product is at most ``num_devices``."""
    return _degree_choices(tuple(d.valid_degrees() for d in op.space), num_devices)


@lru_cache(maxsize=4096)
def _degree_choices(per_dim: tuple[tuple[int, ...], ...],
                    num_devices: int) -> list[tuple[int, ...]]:
    per_dim = tuple(tuple(d for d in degrees if d <= num_devices) for degrees in per_dim)
    return [c for c in itertools.product(*per_dim) if math.prod(c) <= num_devices]


def valid_configs(op: Op, num_devices: int) -> Iterator[ParallelConfig]:
    for degrees in degree_choices(op, num_devices):
        tasks = math.prod(degrees)
        for start in range(num_devices - tasks + 1):
            yield ParallelConfig(degrees, tuple(range(start, start + tasks)))


def count_configs(op: Op, num_devices: int) -> int:
    return sum(num_devices - math.prod(c) + 1 for c in degree_choices(op, num_devices))


def random_config(op: Op, num_devices: int, rng: random.Random) -> ParallelConfig:
    """A config drawn uniformly over degree tuples, then over start devices."""
    degrees = rng.choice(degree_choices(op, num_devices))
    tasks = math.prod(degrees)
    start = rng.randrange(num_devices - tasks + 1)
    return ParallelConfig(degrees, tuple(range(start, start + tasks)))
