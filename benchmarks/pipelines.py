"""Pipelines in the simulator and the search: the figures of the README's "Pipelines".

    python benchmarks/pipelines.py [--iterations N] [--proposals N]

1. The bubble of a uniform 4-stage chain (1 s forward and 2 s backward a stage pass,
   transfers free) for GPipe and 1F1B at 1-16 micro-batches, against the textbook's
   (p - 1) / (m + p - 1) of the step.
2. Its timeline at 4 micro-batches, drawn as text: a row per device, a column per
   second; a forward pass shows its micro-batch's number, a backward pass its letter
   (micro-batch 0: a), idle time a dot.
3. The 48-layer GPT (GPT-2 XL sized, batch 64, bf16) on 4 nodes of 8 H100s: data
   parallelism, layers cut into 4 node-wide stages (8-way sample splits inside each)
   with and without micro-batches, and searches of N proposals from the same seed:
   without pipelines (one micro-batch, no stage moves), with stage moves only, and with
   pipelines (started in 8 micro-batches under 1F1B, pipeline and stage moves on).
4. Delta simulation with micro-batches: the mean time of a random op proposal (each
   rejected, so each starts from the same strategy) on the staged GPT at 1 and at 8
   micro-batches.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from flextui.cost import AnalyticCostModel
from flextui.cost.model import CostModel, OpCost
from flextui.graph import GraphBuilder, OpGraph
from flextui.graph.library import load_model
from flextui.machine import Cluster, Device, Link, load_named_cluster
from flextui.machine.cluster import DeviceSpec
from flextui.search.options import SearchOptions
from flextui.search.pipeline import on_group
from flextui.search.runner import run_search
from flextui.session.gantt import build_lanes, rasterize
from flextui.sim import DeltaSimulator, Simulator, TaskKind
from flextui.sim.timeline import Timeline
from flextui.strategy import ParallelConfig, Strategy, builtin_strategy, random_config
from flextui.strategy.pipeline import Pipeline, Schedule
from flextui.strategy.precision import Precision


class TextbookCost(CostModel):
    """1 s forward, 2 s backward a task; inputs, transfers and updates free."""

    identity = "textbook"

    def op_cost(self, op, block_shape, device):
        return OpCost(0.0, 0.0) if op.type == "input" else OpCost(1.0, 2.0)

    def transfer_s(self, nbytes, link):
        return 0.0

    def update_s(self, nbytes, device, optimizer=None):
        return 0.0


def four_stages() -> tuple[OpGraph, Cluster, Strategy]:
    g = GraphBuilder("four-stages")
    x = g.input((16, 8), name="x")
    for i in range(4):
        x = g.linear(x, 8, name=f"fc{i}")
    graph = g.build()
    spec = DeviceSpec("unit", 1 << 30, {"float32": 1e12}, 1e12)
    devices = [Device(i, f"d{i}", 0, spec) for i in range(4)]
    links = [Link(k, f"d{a}->d{b}", "test", f"d{a}", f"d{b}", 1e9, 0.0)
             for k, (a, b) in enumerate((a, b) for i in range(3)
                                        for a, b in ((i, i + 1), (i + 1, i)))]
    cluster = Cluster("line4", devices, links)
    place = {"x": 0, **{f"fc{i}": i for i in range(4)}}
    return graph, cluster, Strategy({op.name: ParallelConfig((1,) * len(op.space),
                                                             (place[op.name],))
                                     for op in graph.ops}, "four stages")


def bubbles() -> None:
    graph, cluster, strategy = four_stages()
    sim = Simulator(graph, cluster, TextbookCost())
    print("1. The bubble of a uniform 4-stage pipeline (1 s forward, 2 s backward a pass)")
    print(f"{'m':>3} {'schedule':>8} {'step (s)':>9} {'idle share':>11} {'textbook':>9} "
          f"{'held (stage 0..3)':>18}")
    whole = [d.memory.activations for d in sim.simulate(strategy).devices]
    for m in (1, 2, 4, 8, 16):
        for schedule in Schedule:
            t = sim.simulate(strategy.with_pipeline(Pipeline(m, schedule)))
            idle = max(d.idle_s for d in t.devices) / t.makespan
            held = [round(d.memory.activations * m / w) for d, w in zip(t.devices, whole)]
            print(f"{m:>3} {schedule.value:>8} {t.makespan:>9.1f} {idle:>11.4f} "
                  f"{3 / (m + 3):>9.4f} {held!s:>18}")
    print("   (held: the micro-batches whose activations each stage holds at once)")


def picture(timeline: Timeline) -> list[str]:
    """The timeline as text, a column per second (see the module docstring)."""
    rows = []
    width = round(timeline.makespan)
    for lane in build_lanes(timeline):
        if lane.kind != "device":
            continue
        text = []
        for cell in rasterize(lane, 0.0, float(width), width):
            task = lane.tasks[cell.task] if cell.kind is not None else None
            if task is None or task.kind not in (TaskKind.FORWARD, TaskKind.BACKWARD):
                text.append(".")
            elif task.kind == TaskKind.FORWARD:
                text.append(str(task.micro % 10))
            else:
                text.append(chr(ord("a") + task.micro % 26))
        rows.append(f"{lane.name:>3} {''.join(text)}")
    return rows


def pictures() -> None:
    graph, cluster, strategy = four_stages()
    sim = Simulator(graph, cluster, TextbookCost())
    print("\n2. The timelines at 4 micro-batches (a column a second; 0-3 forward, a-d "
          "backward)")
    for schedule in Schedule:
        t = sim.simulate(strategy.with_pipeline(Pipeline(4, schedule)))
        print(f"{schedule.value} ({t.makespan:.0f} s):")
        for row in picture(t):
            print("   " + row)


def gpt() -> tuple[OpGraph, Cluster]:
    return (load_model("transformer", batch_size=64, layers=48, width=1600, heads=25),
            load_named_cluster("h100-cluster"))


def staged(graph: OpGraph, cluster: Cluster, stages: int, m: int) -> Strategy:
    """The layers cut into ``stages`` runs of about equal length, each on one block of
    devices, every op split by samples over its block (as a micro-batch allows)."""
    dp = builtin_strategy("data-parallel", graph, cluster)
    layers = list(dict.fromkeys(op.layer for op in graph.ops))
    per, size = math.ceil(len(layers) / stages), cluster.num_devices // stages
    configs = {}
    for op in graph.ops:
        s = min(layers.index(op.layer) // per, stages - 1)
        configs[op.name] = on_group(op, dp[op.name], tuple(range(s * size, (s + 1) * size)), m)
    return Strategy(configs, f"{stages} stages")


def gpt_figures(iterations: int) -> None:
    graph, cluster = gpt()
    sim = Simulator(graph, cluster, AnalyticCostModel())
    bf16 = Precision.BF16
    print(f"\n3. 48-layer GPT, batch 64, bf16, {cluster.name} ({cluster.num_devices} GPUs), "
          "simulated step")
    dp = sim.simulate(builtin_strategy("data-parallel", graph, cluster).with_precision(bf16))
    print(f"   data parallel: {dp.makespan * 1e3:.1f} ms")
    for m in (1, 4, 8):
        for schedule in ((Schedule.GPIPE,) if m == 1 else tuple(Schedule)):
            s = staged(graph, cluster, 4, m).with_pipeline(Pipeline(m, schedule))
            t = sim.simulate(s.with_precision(bf16))
            peak = max(d.memory.total for d in t.devices) / 2**30
            what = "1 micro-batch" if m == 1 else f"{m} micro-batches, {schedule.value}"
            print(f"   4 node-wide stages, {what}: {t.makespan * 1e3:.1f} ms, "
                  f"{peak:.1f} GiB on the fullest GPU")
    runs = {"without pipelines": {"pipeline": 0.0, "stage": 0.0},
            "stage moves only": {"pipeline": 0.0},
            "with pipelines": {"microbatches": 8, "schedule": Schedule.ONE_F_ONE_B}}
    for name, changes in runs.items() if iterations else ():
        began = time.perf_counter()
        options = SearchOptions(iterations=iterations, seed=0, converge=False, precision=bf16,
                                **changes)
        result = run_search(graph, cluster, AnalyticCostModel(), options)
        best = sim.simulate(result.best)
        print(f"   search, {name}, {iterations} proposals: best {best.makespan * 1e3:.1f} ms "
              f"({result.best.pipeline.describe()}; "
              f"{len({c.distinct_devices for c in result.best.values()})} device sets) in "
              f"{time.perf_counter() - began:.0f} s")


def delta_speed(proposals: int) -> None:
    graph, cluster = gpt()
    print(f"\n4. Delta simulation, {proposals} random op proposals on the 4-stage GPT")
    for m, schedule in ((1, Schedule.GPIPE), (8, Schedule.GPIPE), (8, Schedule.ONE_F_ONE_B)):
        strategy = staged(graph, cluster, 4, m).with_pipeline(
            Pipeline(m, schedule)).with_precision(Precision.BF16)
        delta = DeltaSimulator(graph, cluster, AnalyticCostModel())
        began = time.perf_counter()
        delta.reset(strategy)
        full = time.perf_counter() - began
        tasks = len(delta.tg.live_ids())
        rng = random.Random(0)
        began = time.perf_counter()
        for _ in range(proposals):   # each from the staged strategy: rejected
            op = rng.choice(graph.ops)
            delta.propose(op, random_config(op, cluster.num_devices, rng, m))
            delta.reject()
        each = (time.perf_counter() - began) / proposals
        what = f"{m} micro-batches, {schedule.value}" if m > 1 else "1 micro-batch"
        print(f"   {what}: {tasks:,} tasks, full simulation {full:.2f} s, a "
              f"proposal {each * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=5000,
                        help="proposals each GPT search makes (default 5000; 0: none)")
    parser.add_argument("--proposals", type=int, default=200,
                        help="proposals timed under delta simulation (default 200; 0: none)")
    args = parser.parse_args()
    bubbles()
    pictures()
    gpt_figures(args.iterations)
    if args.proposals:
        delta_speed(args.proposals)


if __name__ == "__main__":
    main()
