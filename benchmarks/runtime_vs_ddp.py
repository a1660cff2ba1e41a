"""flextui's runtime against PyTorch's DistributedDataParallel, data parallel, on the same
ranks: the same model (the graph's ops through the same block kernels: in DDP as one
nn.Module over the rank's share of the batch), the same batch, SGD with momentum.

Each rank alternates rounds of DDP steps and flextui steps (so both meet the same load)
and reports its median step time; the throughput ratio is DDP's step time over
flextui's (1.0: as fast as DDP, above: faster).

    python benchmarks/runtime_vs_ddp.py [--ranks 2] [--model mlp -o width=1024 ...]
        [--steps 20] [--rounds 5] [--backend gloo|nccl]

The script starts torchrun on itself (one thread per rank on the CPU); NCCL on GPUs
when --backend nccl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_OPTIONS = ["in_features=1024", "width=1024", "layers=4", "num_classes=1000"]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="mlp")
    p.add_argument("--batch-size", "-b", type=int, default=64)
    p.add_argument("--option", "-o", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=20, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--rank-program", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def launcher(args: argparse.Namespace) -> None:
    from flextui.runtime.launch import free_port
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(args.ranks), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"localhost:{free_port()}", "--max-restarts", "0",
               __file__, "--rank-program", "--model", args.model, "-b", str(args.batch_size),
               "--steps", str(args.steps), "--rounds", str(args.rounds),
               "--backend", args.backend]
    for option in args.option or DEFAULT_OPTIONS:
        command += ["-o", option]
    out = subprocess.run(command, capture_output=True, text=True, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not rows:
        sys.exit(f"the ranks failed:\n{out.stderr[-4000:]}")
    options = " ".join(args.option or DEFAULT_OPTIONS)
    print(f"{args.model} ({options}), batch {args.batch_size}, data parallel on {args.ranks} "
          f"ranks ({args.backend}), {args.rounds} rounds of {args.steps} steps each")
    for row in sorted(rows, key=lambda r: r["rank"]):
        print(f"  rank {row['rank']}: DDP {row['ddp_s'] * 1e3:.2f} ms/step, flextui "
              f"{row['flextui_s'] * 1e3:.2f} ms/step")
    ddp = max(r["ddp_s"] for r in rows)
    ours = max(r["flextui_s"] for r in rows)
    print(f"throughput: DDP {args.batch_size / ddp:,.1f} samples/s, flextui "
          f"{args.batch_size / ours:,.1f} samples/s; flextui / DDP = {ddp / ours:.3f}")


def rank_program(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from flextui.graph import full_region
    from flextui.graph.kernels import kernel_for
    from flextui.graph.kernels.synthetic import input_block
    from flextui.graph.library import load_model
    from flextui.machine.detect import cpu_ranks
    from flextui.runtime.comm import Comm
    from flextui.runtime.engine import RankProgram, kernel_seed, within
    from flextui.runtime.plan import compile_plan, index_bounds
    from flextui.runtime.values import parameter_block
    from flextui.strategy import builtin_strategy

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl = args.backend == "nccl"
    device = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if nccl else "cpu")
    options = dict(o.split("=", 1) for o in (args.option or DEFAULT_OPTIONS))
    graph = load_model(args.model, batch_size=args.batch_size, **options)
    cluster = cpu_ranks(world)
    strategy = builtin_strategy("data-parallel", graph, cluster)
    plan = compile_plan(graph, strategy, world)
    program = RankProgram(plan, rank, Comm(rank, plan.sync_groups(), device))

    class GraphModule(torch.nn.Module):
        """The whole graph over this rank's block of samples, through the kernels."""

        def __init__(self) -> None:
            super().__init__()
            roles = {p.name: op.param_specs[i].role for op in graph.ops
                     for i, p in enumerate(op.params)}
            self.weights = torch.nn.ParameterList(
                parameter_block(p, roles[p.name], full_region(p.shape), 0, torch.float32,
                                device) for p in graph.parameters.values())
            self.index = {name: i for i, name in enumerate(graph.parameters)}
            self.bounds = index_bounds(graph)

        def forward(self, step: int) -> torch.Tensor:
            outputs: dict[int, list[torch.Tensor]] = {}
            loss = torch.zeros((), device=device)
            for op in graph.ops:
                region = plan.region(op, plan.tasks_on(op, rank)[0])
                if op.type == "input":
                    inputs = [input_block(op, op.output_regions(region)[0], 0, step,
                                          torch.float32, self.bounds.get(op.index), device)]
                else:
                    inputs = []
                    for t, need in zip(op.inputs, op.input_regions(region)):
                        producer = t.producer
                        assert producer is not None
                        have = producer.output_regions(
                            plan.region(producer, plan.tasks_on(producer, rank)[0]))[t.index]
                        inputs.append(outputs[producer.index][t.index][within(need, have)])
                shards = [self.weights[self.index[p.name]][
                    within(op.param_region(i, region), full_region(p.shape))]
                    for i, p in enumerate(op.params)]
                outs, share = kernel_for(op.type).forward_loss(op, region, inputs, shards,
                                                               kernel_seed(0, step))
                outputs[op.index] = outs
                if share is not None:
                    loss = loss + share
            return loss

    module = GraphModule()
    ddp = DistributedDataParallel(module)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

    def ddp_step(step: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        # DDP averages gradients over ranks; the loss shares are parts of one mean, so
        # scale by the world size to train on the same gradient as flextui's sum
        (ddp(step) * world).backward()
        optimizer.step()

    def timed(fn) -> float:
        for step in range(3):
            fn(step)
        if nccl:
            torch.cuda.synchronize(device)
        dist.barrier()
        started = time.perf_counter()
        for step in range(args.steps):
            fn(step)
        if nccl:
            torch.cuda.synchronize(device)
        return (time.perf_counter() - started) / args.steps

    ddp_times, ours = [], []
    for _ in range(args.rounds):
        ddp_times.append(timed(ddp_step))
        ours.append(timed(program.step))
    line = json.dumps({"rank": rank, "ddp_s": statistics.median(ddp_times),
                       "flextui_s": statistics.median(ours)})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    arguments = parse()
    if arguments.rank_program:
        rank_program(arguments)
    else:
        launcher(arguments)
