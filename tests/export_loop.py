"""A user's own training loop, plain PyTorch, with or without a plan ``flextui export
--format torch`` wrote: ``python -m torch.distributed.run --nproc-per-node N
export_loop.py MODEL.py PLAN.py STEPS OUT_DIR`` (gloo), or ``train(MODEL.py, None,
STEPS)`` in one process. Each rank writes OUT_DIR/rank<R>.json: its PID, the loss at
every step (the mean over ranks) and the local shape of every parameter."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

BATCH, LR, MOMENTUM = 8, 0.1, 0.9


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_batch(model_file, step: int) -> tuple[torch.Tensor, ...]:
    """The global batch of ``step``: the model's example inputs, drawn from the step's seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1000 + step)
        return tuple(t.double() if t.is_floating_point() else t
                     for t in model_file.example_inputs(BATCH))


def train(model_path: str, plan_path: str | None, steps: int) -> dict:
    model_file = load(model_path, "user_model")
    torch.manual_seed(0)
    model = model_file.model().double()
    mesh = plan = None
    if plan_path is not None:
        plan = load(plan_path, "plan")
        mesh = plan.device_mesh("cpu")
        model = plan.parallelize(model, mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(steps):
        batch = step_batch(model_file, step)
        if plan is not None:
            batch = tuple(plan.local_batch(t, mesh) for t in batch)
        loss = model(*batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        if dist.is_initialized():  # every rank's loss over equal blocks: their mean
            dist.all_reduce(total)
            total /= dist.get_world_size()
        losses.append(total.item())
    shapes = {name: list(getattr(p, "_local_tensor", p).shape)
              for name, p in model.named_parameters()}
    return {"pid": os.getpid(), "losses": losses, "shapes": shapes}


def main() -> None:
    model_path, plan_path, steps, out = sys.argv[1:]
    dist.init_process_group("gloo")
    result = train(model_path, plan_path, int(steps))
    Path(out, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    # The model's DTensors and its DeviceMesh hold the mesh's gloo groups in reference
    # cycles; left to the interpreter's exit, their teardown aborted a rank now and then
    # ("terminate called without an active exception": 2 of 60 runs under load, with
    # the barrier below). Collected while the interpreter is whole, and every rank done
    # before any tears its groups down: 0 of 180.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()


if __name__ == "__main__":
    main()
