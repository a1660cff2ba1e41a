"""Run under torchrun by tests/test_runtime_sharded.py: small models under strategies
that shard parameters' training state (alone, and among op splits and recomputation),
4 steps of AdamW at a warmed-up cosine rate with the gradient norm clipped, and of SGD
with momentum and weight decay, on this launch's ranks (gloo, float64), against the
whole graph trained by torch.optim's own optimizer and clip_grad_norm_ in this process.
Each rank prints one JSON line per case: the largest relative error of the losses and of
its parameter shards, the optimizer state it keeps against what it would keep
unsharded, and the parameter elements it keeps between steps against its boxes'."""

import json
import sys

import torch
import torch.distributed as dist

from flextui.cost.optimizers import OptimizerKind
from flextui.graph import full_region
from flextui.machine.detect import cpu_ranks
from flextui.runtime.comm import Comm
from flextui.runtime.engine import RankProgram, within
from flextui.runtime.optimizer import LrSchedule, Optimizer
from flextui.runtime.plan import compile_plan
from flextui.runtime.reference import train_whole
from flextui.runtime.worker import relative_error
from runtime_models import small, strategy

MODELS = ["mlp", "transformer"]
STRATEGIES = ["zero1-data-parallel", "zero2-random-3", "zero2-recompute-random-2",
              "zero3-data-parallel", "zero3-random-3", "zero3-recompute-random-2"]
UPDATES = {
    "adamw-cosine-clip": Optimizer(kind=OptimizerKind.ADAMW, lr=0.02, betas=(0.8, 0.99),
                                   eps=1e-7, weight_decay=0.1, schedule=LrSchedule.COSINE,
                                   warmup_steps=1, total_steps=4, grad_clip=0.05),
    "sgd-decay": Optimizer(kind=OptimizerKind.SGD, lr=0.05, momentum=0.8, weight_decay=0.01),
}
STEPS = 4


def state_elements(program: RankProgram) -> int:
    tensors = [m for ms in program.update.moments.values() for m in ms]
    tensors += list(program.update.sharded.state_tensors().values())
    return sum(t.numel() for t in tensors)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cluster = cpu_ranks(world)
    cpu = torch.device("cpu")
    for model in MODELS:
        graph = small(model)
        for update, settings in UPDATES.items():
            for name in STRATEGIES:
                s = strategy(name, graph, cluster)
                reference = train_whole(graph, STEPS, optimizer=settings, strategy=s)
                plan = compile_plan(graph, s, world)
                program = RankProgram(plan, rank, Comm(rank, plan.sync_groups(), cpu),
                                      dtype=torch.float64, optimizer=settings)
                results = [program.step(step) for step in range(STEPS)]
                losses = torch.tensor([r.loss_share for r in results], dtype=torch.float64)
                dist.all_reduce(losses)
                loss_error = max(abs(a - b) / abs(b) for a, b in zip(losses.tolist(),
                                                                      reference.losses))
                kept = sum(p.untyped_storage().size() // p.element_size()
                           for p in program.params.values()) + \
                    sum(part.numel() for part in program.update.sharded.parts.values())
                with program.whole_params():
                    param_error = max((relative_error(
                        program.params[p].detach(),
                        reference.params[p][within(box, full_region(reference.params[p].shape))])
                        for p, box in program.boxes.items()), default=0.0)
                whole = sum(p.numel() for p in program.params.values())
                unsharded = whole * settings.kind.states
                line = json.dumps({"model": model, "update": update, "strategy": name,
                                   "rank": rank, "loss_error": loss_error,
                                   "param_error": param_error,
                                   "state": state_elements(program), "unsharded": unsharded,
                                   "params_kept": kept, "params_whole": whole})
                sys.stdout.write(line + "\n")  # one write: ranks share the pipe
                sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
