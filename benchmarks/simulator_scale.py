"""Simulator scale: GPT models on 64 to 1,024 GPUs.

The 48- and 96-layer GPT of width 1600 (GPT-2 XL's shape: 25 heads, 1,024 tokens, the
library's ``transformer`` model) with one sequence per GPU, under data parallelism and
the expert strategy (Megatron: tensor parallel inside a node, data parallel across
nodes), on DGX H100-style nodes of 8 GPUs (the library cluster h100-cluster, resized).
For each case: the tasks of its simulated iteration, the time of a full simulation
(and per task: the cost grows linearly with the tasks when that column is flat), the
mean time of a delta simulation of a random one-op proposal (propose, then reject, so
every proposal starts from the measured strategy), and memory: each case runs in a
fresh child process, whose peak resident set (ru_maxrss) is the case's own; "before"
is that peak once flextui is imported and the model, cluster and strategy are built.
(25 heads split at most 5 ways, so the expert strategy's attention runs on 5 GPUs of a
node where its dense layers run on 8, and moves data between them; --heads 32 splits 8
ways.)

    python benchmarks/simulator_scale.py [--layers 48 96] [--devices 64 256 1024]
        [--strategies data-parallel expert] [--proposals 20]

A quick check: --layers 2 --devices 8 16.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from reference import reference_s

CLUSTER = "h100-cluster"
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Case:
    layers: int
    strategy: str
    devices: int


@dataclass(frozen=True)
class Model:
    """The GPT's shape, and how many sequences each GPU gets."""

    width: int
    heads: int
    seq_len: int
    batch_per_gpu: int


@dataclass(frozen=True)
class Figures:
    tasks: int
    full_s: float
    delta_s: float
    before_mib: float
    peak_mib: float
    core_bytes: int     # the task store's, the times' and the timeline's columns


def core_bytes(timeline, delta) -> int:
    """What the simulator's core holds for a strategy: the task store, the times (three
    doubles and an order slot a task id) and the timeline's columns."""
    return (delta.tg.store.memory_bytes() + 28 * len(delta.times.ready)
            + timeline.tasks.memory_bytes())


def peak_mib() -> float:
    """This process's peak resident set so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(case: Case, model: Model, proposals: int, seed: int) -> Figures:
    """One case, in a child process of its own (so the peak memory is this case's)."""
    from flextui.cost import AnalyticCostModel
    from flextui.graph.library import load_model
    from flextui.machine import load_named_cluster
    from flextui.sim import DeltaSimulator, Simulator
    from flextui.strategy import builtin_strategy, random_config

    graph = load_model("transformer", layers=case.layers, width=model.width, heads=model.heads,
                       seq_len=model.seq_len, batch_size=model.batch_per_gpu * case.devices)
    cluster = load_named_cluster(CLUSTER, nodes=case.devices // GPUS_PER_NODE)
    strategy = builtin_strategy(case.strategy, graph, cluster)
    cost_model = AnalyticCostModel()
    before = peak_mib()
    start = time.perf_counter()
    timeline = Simulator(graph, cluster, cost_model).simulate(strategy)
    full_s = time.perf_counter() - start
    tasks = len(timeline.tasks)
    delta = DeltaSimulator(graph, cluster, cost_model)
    delta.reset(strategy)
    core = core_bytes(timeline, delta)
    del timeline
    rng, times = random.Random(seed), []
    for _ in range(proposals):
        op = rng.choice(graph.ops)
        config = random_config(op, case.devices, rng)
        start = time.perf_counter()
        delta.propose(op, config)
        delta.reject()
        times.append(time.perf_counter() - start)
    return Figures(tasks, full_s, statistics.mean(times), before, peak_mib(), core)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[48, 96])
    parser.add_argument("--devices", type=int, nargs="+", default=[64, 256, 1024],
                        help=f"GPUs, a multiple of {GPUS_PER_NODE} (a node)")
    parser.add_argument("--strategies", nargs="+", default=["data-parallel", "expert"])
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--heads", type=int, default=25)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-per-gpu", type=int, default=1)
    parser.add_argument("--proposals", type=int, default=20, help="delta proposals per case")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if any(d < GPUS_PER_NODE or d % GPUS_PER_NODE for d in args.devices):
        parser.error(f"--devices: give multiples of {GPUS_PER_NODE} (whole nodes of "
                     f"{CLUSTER}), e.g. 64 256 1024")
    model = Model(args.width, args.heads, args.seq_len, args.batch_per_gpu)
    cases = [Case(layers, strategy, devices) for layers in args.layers
             for strategy in args.strategies for devices in args.devices]
    print(f"GPT width {model.width}, {model.heads} heads, {model.seq_len} tokens, "
          f"{model.batch_per_gpu} sequence(s) per GPU, on {CLUSTER} nodes; "
          f"delta: mean of {args.proposals} random one-op proposals (propose + reject)")
    ref = reference_s()
    print(f"reference work: {ref * 1e3:.1f} ms; core: bytes a task of the task store, times "
          "and timeline columns")
    print(f"{'layers':>6} {'strategy':<14}{'GPUs':>6}{'tasks':>11}{'full (s)':>10}"
          f"{'us/task':>9}{'delta (ms)':>12}{'before (MiB)':>14}{'peak (MiB)':>12}"
          f"{'core B/task':>13}{'full/ref':>10}{'delta/ref':>11}")
    spawn = multiprocessing.get_context("spawn")
    for case in cases:
        row = f"{case.layers:>6} {case.strategy:<14}{case.devices:>6}"
        try:
            with ProcessPoolExecutor(1, mp_context=spawn) as child:
                f = child.submit(measure, case, model, args.proposals, args.seed).result()
        except BrokenProcessPool:   # the next case may still fit
            print(f"{row}  the child process died (out of memory?)", flush=True)
            continue
        print(f"{row}{f.tasks:>11,}{f.full_s:>10.2f}{f.full_s / f.tasks * 1e6:>9.2f}"
              f"{f.delta_s * 1e3:>12.2f}{f.before_mib:>14,.0f}{f.peak_mib:>12,.0f}"
              f"{f.core_bytes / f.tasks:>13.0f}{f.full_s / ref:>10.1f}{f.delta_s / ref:>11.2f}",
              flush=True)
    print(f"reference work at the end: {reference_s() * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
