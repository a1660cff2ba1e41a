"""Run under torchrun by tests/test_runtime_ranks.py: every small model under every test
strategy on this launch's ranks (gloo, float64; a bf16 strategy's ops in bf16, against
one process computing so), 3 SGD steps each, in one set of processes (a launch costs
seconds). Each rank prints one JSON line per case: how far
its parameter shards and each step's loss are from one process, and the bytes it moved
and the gradient all-reduces it started in one step of the graph's own dtype (float32,
as simulated) against what the simulated Timeline puts on its device's links and the
simulated task graph's buckets it is in."""

import json
import sys

import torch
import torch.distributed as dist

from flextui.cost import AnalyticCostModel
from flextui.graph import full_region
from flextui.machine.detect import cpu_ranks
from flextui.runtime.comm import Comm
from flextui.runtime.engine import RankProgram, within
from flextui.runtime.plan import compile_plan
from flextui.runtime.reference import train_whole
from flextui.runtime.worker import relative_error
from flextui.sim import Simulator
from runtime_models import SMALL_MODELS, STRATEGIES, small, strategy


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cluster = cpu_ranks(world)
    cpu = torch.device("cpu")
    for model in SMALL_MODELS:
        graph = small(model)
        whole = train_whole(graph, 3)
        simulator = Simulator(graph, cluster, AnalyticCostModel())
        for name in STRATEGIES:
            s = strategy(name, graph, cluster)
            reference = whole if s.precision == "fp32" else train_whole(graph, 3, strategy=s)
            plan = compile_plan(graph, s, world)
            program = RankProgram(plan, rank, Comm(rank, plan.sync_groups(), cpu),
                                  dtype=torch.float64)
            results = [program.step(step) for step in range(3)]
            losses = torch.tensor([r.loss_share for r in results], dtype=torch.float64)
            dist.all_reduce(losses)
            loss_error = max(abs(a - b) / abs(b) for a, b in zip(losses.tolist(),
                                                                  reference.losses))
            with program.whole_params():
                param_error = max((relative_error(program.params[p].detach(),
                                                  reference.params[p][within(
                                                      box, full_region(reference.params[p].shape))])
                                   for p, box in program.boxes.items()), default=0.0)
            device = simulator.simulate(s).devices[rank]
            buckets = [b for b in simulator.task_graph(s).buckets() if rank in b.devices]
            in_float32 = RankProgram(plan, rank, Comm(rank, plan.sync_groups(), cpu)).step(0)
            line = json.dumps({"model": model, "strategy": name, "rank": rank,
                               "loss_error": loss_error, "param_error": param_error,
                               "sent": in_float32.sent, "received": in_float32.received,
                               "simulated_sent": device.bytes_sent,
                               "simulated_received": device.bytes_received,
                               "sums": in_float32.sums, "simulated_sums": len(buckets)})
            sys.stdout.write(line + "\n")  # one write: ranks share the pipe
            sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
