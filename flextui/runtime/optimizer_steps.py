"""A rank's optimizer step on one parameter box with the run's settings (``engine``):
the steps themselves are ``cost.update_steps``', the ones the profiler times."""

from __future__ import annotations

import torch

from flextui.cost.optimizers import OptimizerKind
from flextui.cost.update_steps import adamw_step, sgd_step
from flextui.runtime.optimizer import Optimizer


def optimizer_step(opt: Optimizer, param: torch.Tensor, grad: torch.Tensor,
                   moments: list[torch.Tensor], lr: float, t: int) -> None:
    """``opt``'s step ``t`` (from 1) on ``param`` with its state ``moments``."""
    if opt.kind == OptimizerKind.ADAMW:
        exp_avg, exp_avg_sq = moments
        adamw_step(param, grad, exp_avg, exp_avg_sq, lr, t, opt.betas, opt.eps,
                   opt.weight_decay)
    else:
        sgd_step(param, grad, moments[0], lr, opt.momentum, opt.weight_decay)
