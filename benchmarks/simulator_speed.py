"""Simulator speed, in the shape of the FlexFlow paper's Table 5.

For each of the paper's six models on P100-style nodes of 4 GPUs (the p100-4x4 cluster
with 1 to 16 nodes): starting from data parallelism, the mean time of a delta
simulation of a random one-op proposal (propose, then accept or reject at random);
then, for the strategy those proposals led to, its task count and the mean time of a
full simulation of it; and their ratio. (Random proposals grow the task graph: a
random config moves more data than data parallelism does, so both are measured on the
same strategy.) Last, the mean time of a step of a real MCMC chain (``Chain.step``:
propagation and tied moves, early rejection, accept or reject), from data parallelism:
the figure a search feels.

    python benchmarks/simulator_speed.py [--devices 4 8 16] [--models inception_v3 nmt]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from reference import reference_s

from flextui.cost import AnalyticCostModel
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions
from flextui.search.mcmc import Chain
from flextui.sim import DeltaSimulator, Simulator
from flextui.strategy import builtin_strategy, random_config

PAPER_MODELS = ["alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt"]
GPUS_PER_NODE = 4


def measure(model: str, devices: int, full_reps: int, proposals: int, seed: int = 0):
    graph = load_model(model)
    cluster = load_named_cluster("p100-4x4", nodes=devices // GPUS_PER_NODE)
    cost_model = AnalyticCostModel()
    strategy = builtin_strategy("data-parallel", graph, cluster)
    delta = DeltaSimulator(graph, cluster, cost_model)
    delta.reset(strategy)
    rng = random.Random(seed)
    deltas = []
    for _ in range(proposals):
        op = rng.choice(graph.ops)
        config = random_config(op, devices, rng)
        start = time.perf_counter()
        delta.propose(op, config)
        delta.accept() if rng.random() < 0.5 else delta.reject()
        deltas.append(time.perf_counter() - start)
    full, timings = Simulator(graph, cluster, cost_model), []
    for _ in range(full_reps):
        start = time.perf_counter()
        timeline = full.simulate(delta.strategy)
        timings.append(time.perf_counter() - start)
    chain = Chain(0, graph, cluster, cost_model, SearchOptions(seed=seed), strategy)
    start = time.perf_counter()
    for _ in range(proposals):
        chain.step()
    step_s = (time.perf_counter() - start) / proposals
    return len(timeline.tasks), statistics.mean(timings), statistics.mean(deltas), step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--models", nargs="+", default=PAPER_MODELS)
    parser.add_argument("--full-reps", type=int, default=3)
    parser.add_argument("--proposals", type=int, default=100)
    args = parser.parse_args()
    if any(devices < GPUS_PER_NODE or devices % GPUS_PER_NODE for devices in args.devices):
        parser.error(f"--devices: whole nodes of {GPUS_PER_NODE} P100s (4, 8, 16, ...)")
    ref = reference_s()
    print(f"reference work: {ref * 1e3:.1f} ms (the ref columns are figures / reference)")
    print(f"{'model':<14}{'GPUs':>5}{'tasks':>9}{'full (ms)':>12}{'delta (ms)':>12}{'speedup':>9}"
          f"{'chain step (ms)':>17}{'full/ref':>10}{'delta/ref':>11}")
    for model in args.models:
        for devices in args.devices:
            tasks, full_s, delta_s, step_s = measure(model, devices, args.full_reps,
                                                     args.proposals)
            print(f"{model:<14}{devices:>5}{tasks:>9}{full_s * 1e3:>12.1f}{delta_s * 1e3:>12.2f}"
                  f"{full_s / delta_s:>8.1f}x{step_s * 1e3:>17.2f}{full_s / ref:>10.2f}"
                  f"{delta_s / ref:>11.3f}", flush=True)
    print(f"reference work at the end: {reference_s() * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
