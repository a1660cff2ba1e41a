"""The valid parallel configs of an op on a cluster (the search space, paper 4).

A config is a degree per parallel dim (each dividing the dim, product <= the device
count) and, as in FlexFlow, a contiguous block of devices ``start .. start+p-1``. With
``microbatches`` above 1 a sample dim's degree also divides a micro-batch's samples
(``pipeline``).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from functools import lru_cache

from flextui.graph import Op
from flextui.graph.dims import Dim, DimKind
from flextui.strategy.config import ParallelConfig
from flextui.strategy.pipeline import splits_micro


def degree_choices(op: Op, num_devices: int, microbatches: int = 1) -> list[tuple[int, ...]]:
    """Every degree tuple of ``op`` whose product is at most ``num_devices`` (and whose
    sample degrees split each of ``microbatches`` micro-batches)."""
    return _degree_choices(tuple(_degrees(d, microbatches) for d in op.space), num_devices)


def _degrees(dim: Dim, microbatches: int) -> tuple[int, ...]:
    if microbatches == 1 or dim.kind != DimKind.SAMPLE:
        return dim.valid_degrees()
    return tuple(d for d in dim.valid_degrees() if splits_micro(dim, d, microbatches))


@lru_cache(maxsize=4096)
def _degree_choices(per_dim: tuple[tuple[int, ...], ...],
                    num_devices: int) -> list[tuple[int, ...]]:
    per_dim = tuple(tuple(d for d in degrees if d <= num_devices) for degrees in per_dim)
    return [c for c in itertools.product(*per_dim) if math.prod(c) <= num_devices]


def valid_configs(op: Op, num_devices: int, microbatches: int = 1,
                  ) -> Iterator[ParallelConfig]:
    for degrees in degree_choices(op, num_devices, microbatches):
        tasks = math.prod(degrees)
        for start in range(num_devices - tasks + 1):
            yield ParallelConfig(degrees, tuple(range(start, start + tasks)))


def count_configs(op: Op, num_devices: int, microbatches: int = 1) -> int:
    return sum(num_devices - math.prod(c) + 1
               for c in degree_choices(op, num_devices, microbatches))


def random_config(op: Op, num_devices: int, rng: random.Random, microbatches: int = 1,
                  ) -> ParallelConfig:
    """A config drawn uniformly over degree tuples, then over start devices."""
    degrees = rng.choice(degree_choices(op, num_devices, microbatches))
    tasks = math.prod(degrees)
    start = rng.randrange(num_devices - tasks + 1)
    return ParallelConfig(degrees, tuple(range(start, start + tasks)))
