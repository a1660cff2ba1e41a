"""A float64 run of a module as its graph runs: casts of float64 tensors to float32
left out (the import's float64 check and the hf: models' float64 runs)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class KeepFloat64(TorchFunctionMode):
    """Casts of float64 tensors to float32 left out: transformers computes some steps
    in float32 whatever the model's dtype (RMSNorm, rotary tables, the loss: an upcast
    for float16 training), which in a float64 model would round them; a model in float64
    then computes in float64 throughout, as its graph does."""

    NARROWING = (torch.Tensor.to, torch.Tensor.float, torch.Tensor.type)

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in self.NARROWING and args and isinstance(args[0], torch.Tensor) \
                and args[0].dtype == torch.float64:
            wide = [torch.float64 if a is torch.float32 else a for a in args[1:]]
            kwargs = {k: torch.float64 if v is torch.float32 else v for k, v in kwargs.items()}
            if func is torch.Tensor.float:
                return args[0]
            return func(args[0], *wide, **kwargs)
        return func(*args, **kwargs)
