"""Tensors and parameters of an operator graph."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flextui.graph.op import Op


class DType(StrEnum):
    """The element types of tensors and parameters (named as torch names them)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT64 = "int64"
    INT32 = "int32"


DTYPE_BYTES: dict[str, int] = {DType.FLOAT32: 4, DType.FLOAT16: 2, DType.BFLOAT16: 2,
                               DType.INT64: 8, DType.INT32: 4}
#: the dtypes devices compute in and profiles are measured in, in their canonical order
FLOAT_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)


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
