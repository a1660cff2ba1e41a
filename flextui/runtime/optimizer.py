"""How a launch updates its parameters, as settings (no torch here: a plan carries them):
the optimizer (SGD with momentum and weight decay, or AdamW), its learning rate at
each step under a schedule, and the clipping of the gradients' global norm.

The update is torch's own, to rounding: ``torch.optim.SGD(lr, momentum, weight_decay)``
or ``torch.optim.AdamW(lr, betas, eps, weight_decay)``, after
``torch.nn.utils.clip_grad_norm_(all parameters, grad_clip)``, its learning rate set
before every step by a ``torch.optim.lr_scheduler.LambdaLR`` of ``factor`` (the
schedules of transformers' ``get_{constant,linear,cosine}_schedule_with_warmup``): a
linear warm-up from 0 over ``warmup_steps`` steps, then constant, or down to 0 at
``total_steps`` linearly or along half a cosine."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from flextui.cost.optimizers import OptimizerKind
from flextui.fields import FormFields

#: the largest float32, the largest learning rate (and weight decay) a rank's optimizer
#: can take
FLOAT32_MAX = 3.4028234663852886e38


class LrSchedule(StrEnum):
    """How the learning rate goes after its warm-up (``--lr-schedule``)."""

    CONSTANT = "constant"
    COSINE = "cosine"
    LINEAR = "linear"


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    """The update of every step of a run of ``total_steps`` steps; every value checked
    when it is made (a FieldError names the field as its command-line flag does)."""

    kind: OptimizerKind = OptimizerKind.SGD
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    schedule: LrSchedule = LrSchedule.CONSTANT
    warmup_steps: int = 0
    total_steps: int = 1
    grad_clip: float | None = None   # the largest global gradient norm; None: no clipping

    def __post_init__(self) -> None:
        f = FormFields()
        f.number(self.lr, "lr", 0.0, FLOAT32_MAX)
        f.number(self.momentum, "momentum", 0.0, 1.0)
        f.number(self.weight_decay, "weight_decay", 0.0, FLOAT32_MAX)
        for beta in f.items(self.betas, "betas", 2):
            f.number(beta, "betas", 0.0, 1.0)
            if beta == 1.0:
                f.fail("betas", "must be numbers below 1 (each a moving average's decay), "
                                "found 1.0")
        f.number(self.eps, "eps", 0.0, 1.0)
        f.integer(self.warmup_steps, "warmup_steps", 0)
        f.integer(self.total_steps, "total_steps", 1)
        if self.grad_clip is not None and \
                f.number(self.grad_clip, "grad_clip", 0.0, FLOAT32_MAX) == 0.0:
            f.fail("grad_clip", "must be a number > 0 (the largest gradient norm), found 0.0")

    def factor(self, step: int) -> float:
        """The learning rate of step ``step`` (from 0) over ``lr``: LambdaLR's lambda."""
        warmup, total = self.warmup_steps, self.total_steps
        if step < warmup:
            return step / max(1, warmup)
        if self.schedule == LrSchedule.CONSTANT:
            return 1.0
        if self.schedule == LrSchedule.LINEAR:
            return max(0.0, (total - step) / max(1, total - warmup))
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    def lr_at(self, step: int) -> float:
        """The learning rate step ``step`` (from 0) updates with, as LambdaLR sets it."""
        return self.lr * self.factor(step)


SGD = Optimizer()
