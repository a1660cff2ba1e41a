"""The optimizers' steps on one parameter box, element by element as torch.optim's
single-tensor SGD and AdamW make them (a rank's update, ``engine``)."""

from __future__ import annotations

import torch

from flextui.cost.optimizers import OptimizerKind
from flextui.runtime.optimizer import Optimizer


def optimizer_step(opt: Optimizer, param: torch.Tensor, grad: torch.Tensor,
                   moments: list[torch.Tensor], lr: float, t: int) -> None:
    """``opt``'s step ``t`` (from 1) on ``param`` with its state ``moments``."""
    if opt.kind == OptimizerKind.ADAMW:
        adamw_step(param, grad, moments, lr, opt, t)
    else:
        sgd_step(param, grad, moments[0], lr, opt)


def sgd_step(param: torch.Tensor, grad: torch.Tensor, velocity: torch.Tensor, lr: float,
         opt: Optimizer) -> None:
    """torch.optim.SGD's step: g + weight_decay * w into the momentum buffer (which
    starts at the first gradient: 0 * momentum + g), w - lr * buffer."""
    if opt.weight_decay != 0:
        grad = grad.add(param, alpha=opt.weight_decay)
    velocity.mul_(opt.momentum).add_(grad)
    param.add_(velocity, alpha=-lr)


def adamw_step(param: torch.Tensor, grad: torch.Tensor, moments: list[torch.Tensor], lr: float,
           opt: Optimizer, t: int) -> None:
    """torch.optim.AdamW's step ``t`` (from 1): decoupled weight decay, the moving
    averages, their bias corrections."""
    exp_avg, exp_avg_sq = moments
    beta1, beta2 = opt.betas
    param.mul_(1 - lr * opt.weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1 ** t)
    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** t) ** 0.5).add_(opt.eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)
