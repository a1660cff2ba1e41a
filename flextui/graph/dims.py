"""Parallelizable dimensions of an operator (FlexFlow paper, section 4 and Table 2)."""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass


class DimKind(str, enum.Enum):  # noqa: UP042 (a StrEnum would print differently)
    """How partitioning an op's output along a dim affects the op.

    SAMPLE splits the batch; ATTRIBUTE splits along another dim without splitting any
    parameter (image height/width, sequence length); PARAMETER splits the op's
    parameters (a conv's out-channels, a linear layer's out-features).
    """

    SAMPLE = "sample"
    ATTRIBUTE = "attribute"
    PARAMETER = "parameter"


@dataclass(frozen=True)
class Dim:
    """One dim of an op's partition space.

    ``kind`` is None for a dim the op cannot be partitioned along (the reduced dim of a
    softmax, the concat axis). A degree along this dim must divide ``splits``, which is
    the dim's size unless the op needs coarser blocks (attention heads).
    """

    name: str
    size: int
    kind: DimKind | None
    splits: int = 0

    def __post_init__(self) -> None:
        if self.splits == 0:
            object.__setattr__(self, "splits", self.size)

    @property
    def parallel(self) -> bool:
        return self.kind is not None

    def valid_degrees(self) -> tuple[int, ...]:
        """The degrees this dim may be split into (1 alone if it is not parallel)."""
        return _divisors(self.splits) if self.parallel else (1,)


@functools.cache
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))
