"""Tensors and parameters of an operator graph."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flextui.graph.op import Op

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


@dataclass(eq=False)
class Tensor:
    """An activation: the output ``index`` of op ``producer``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    producer: Op | None = field(default=None, repr=False)
    index: int = 0

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtype_bytes(self.dtype)


@dataclass(eq=False)
class Parameter:
    """Trainable weights; several ops may share one (the unrolled steps of an LSTM)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_bytes(self.dtype)
