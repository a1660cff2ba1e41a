"""The optimizers' steps on one parameter shard, element by element as torch.optim's
single-tensor SGD and AdamW make them: what a rank runs (``runtime.optimizer_steps``,
with the run's settings) and what the profiler times (``cost.update``), one function
for both, so a measured update is the update a run makes. No torch import here: the
steps only call the tensors' own methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def sgd_step(param: torch.Tensor, grad: torch.Tensor, velocity: torch.Tensor, lr: float,
             momentum: float, weight_decay: float) -> None:
    """torch.optim.SGD's step: g + weight_decay * w into the momentum buffer (which
    starts at the first gradient: 0 * momentum + g), w - lr * buffer."""
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    velocity.mul_(momentum).add_(grad)
    param.add_(velocity, alpha=-lr)


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
               exp_avg_sq: torch.Tensor, lr: float, t: int, betas: tuple[float, float],
               eps: float, weight_decay: float) -> None:
    """torch.optim.AdamW's step ``t`` (from 1): decoupled weight decay, the moving
    averages, their bias corrections."""
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1 ** t)
    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** t) ** 0.5).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)
