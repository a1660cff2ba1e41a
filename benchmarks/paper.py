"""The FlexFlow paper's evaluation, reproduced in simulation: its six models on its two
clusters at its batches, data parallelism, the expert strategies and a search.

For each model on 16 P100s (``p100-4x4``: 4 nodes of 4, NVLink inside a node, 100 Gb/s
InfiniBand between) and 64 K80s (``k80-16x4``: 16 nodes of 4, PCIe inside, 56 Gb/s
InfiniBand), at the paper's per-GPU batch (64 samples, 256 for AlexNet: section 8), with
the analytic cost model: data parallelism and the expert strategy (Krizhevsky's "one
weird trick" for the CNNs, Wu et al.'s GNMT placement for the RNNs, as section 8.1
describes them) are simulated, then one search (one chain, from the faster of the two,
stopped by the paper's rule: no better strategy for half the search so far) runs with a
budget of the paper's Table 5 delta-simulation search time for that model and GPU count,
capped at --cap seconds. Memory is not counted against a strategy (the paper's
simulator has no memory model); the ``fits`` column says whether the searched strategy
fits the GPUs' memory in flextui's memory model.

Printed per model: the simulated iteration time of each (ms) and, for data parallelism,
the busiest GPU's compute time (the iteration less what it spends waiting), the searched
strategy's
speedup over the better baseline beside the paper's (Figure 6: 1.3-3.3x for five
models, about 1x for ResNet-101; Figure 7: NMT on 64 K80s 1.7-2.4x), the bytes each
moves between devices per iteration (GB; Figure 7b: FlexFlow 2-5.5x fewer on NMT at 64
K80s) and its total task computation time (s, summed over the GPUs; Figure 7c: the
expert's about FlexFlow's, both 20% under data parallelism's), and when the search found
its best, when it stopped and the paper's Table 5 delta time (s).

    python benchmarks/paper.py [--cap 600] [--clusters p100-4x4 k80-16x4] [--models nmt]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from search_throughput import PAPER_MODELS, TABLE5, TABLE5_MODELS, BestTime

from flextui.cost import AnalyticCostModel
from flextui.graph import OpGraph
from flextui.graph.library import load_model, model_info
from flextui.machine import Cluster, load_named_cluster
from flextui.search import SearchOptions, run_search
from flextui.search.baselines import search_simulator
from flextui.sim import MemoryPolicy, Timeline
from flextui.strategy import Strategy, builtin_strategy

CLUSTERS = {"p100-4x4": 16, "k80-16x4": 64}
#: the searched strategy's speedup over the better baseline the paper reports
PAPER_SPEEDUP = {"resnet101": "~1x"}
FIGURE6 = "1.3-3.3x"
FIGURE7 = "1.7-2.4x"


@dataclass(frozen=True)
class Simulated:
    iteration_s: float
    busiest_s: float   # the busiest GPU's compute: the iteration less that is exposed waiting
    moved_bytes: int
    compute_s: float
    fits: bool


def simulated(graph: OpGraph, cluster: Cluster, options: SearchOptions,
              strategy: Strategy) -> Simulated:
    timeline: Timeline = search_simulator(graph, cluster, AnalyticCostModel(),
                                          options).simulate(strategy)
    return Simulated(timeline.makespan, max(d.busy_s for d in timeline.devices),
                     sum(d.bytes_sent for d in timeline.devices),
                     sum(timeline.compute_by_op().values()),
                     all(d.memory.over == 0 for d in timeline.devices))


def paper_speedup(model: str, devices: int) -> str:
    if model == "nmt" and devices == 64:
        return FIGURE7
    return PAPER_SPEEDUP.get(model, FIGURE6)


def row(model: str, cluster: Cluster, cap: float, seed: int) -> str:
    devices = cluster.num_devices
    per_device = model_info(model).paper_batch_per_device
    assert per_device is not None, model
    batch = per_device * devices
    graph = load_model(model, batch_size=batch)
    delta_s = TABLE5[devices][TABLE5_MODELS.index(model)][1]
    options = SearchOptions(time_limit=min(delta_s, cap), seed=seed, converge=True,
                            memory=MemoryPolicy.IGNORE)
    dp = simulated(graph, cluster, options, builtin_strategy("data-parallel", graph, cluster))
    expert = simulated(graph, cluster, options, builtin_strategy("expert", graph, cluster))
    best_time = BestTime()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_search(graph, cluster, AnalyticCostModel(), options,
                            log_path=Path(tmp) / "paper.ffsearch", on_events=best_time,
                            baselines={"data-parallel": dp.iteration_s,
                                       "expert": expert.iteration_s})
    found = simulated(graph, cluster, options, result.best)
    speedup = min(dp.iteration_s, expert.iteration_s) / found.iteration_s
    return (f"{model:<13}{devices:>5}{batch:>7,}"
            f"{dp.iteration_s * 1e3:>10.1f}{dp.busiest_s * 1e3:>8.1f}"
            f"{expert.iteration_s * 1e3:>10.1f}"
            f"{found.iteration_s * 1e3:>10.1f}{speedup:>8.2f}x{paper_speedup(model, devices):>10}"
            f"   {dp.moved_bytes / 1e9:>6.2f}/{expert.moved_bytes / 1e9:.2f}"
            f"/{found.moved_bytes / 1e9:.2f}"
            f"   {dp.compute_s:>6.2f}/{expert.compute_s:.2f}/{found.compute_s:.2f}"
            f"   {best_time.found_at(result.initial_cost):>6.1f}/{result.elapsed:.1f}"
            f"/{delta_s:g}{'' if found.fits else '   over memory'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap", type=float, default=600.0,
                        help="most seconds a search runs (default 600: 10 minutes)")
    parser.add_argument("--clusters", nargs="+", default=list(CLUSTERS), choices=CLUSTERS)
    parser.add_argument("--models", nargs="+", default=PAPER_MODELS, choices=PAPER_MODELS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{datetime.date.today()}, load average {os.getloadavg()[0]:.1f}; analytic cost "
          f"model; searches capped at {args.cap:g} s")
    print(f"{'model':<13}{'GPUs':>5}{'batch':>7}{'data par.':>10}{'busiest':>8}{'expert':>10}"
          f"{'searched':>10}{'x best':>9}{'paper':>10}   {'GB moved dp/ex/s':<18}"
          f"{'compute s dp/ex/s':<21}search best at/ran/Table 5 delta (s)")
    for name in args.clusters:
        cluster = load_named_cluster(name)
        assert cluster.num_devices == CLUSTERS[name], name
        for model in args.models:
            print(row(model, cluster, args.cap, args.seed), flush=True)
    print(f"{(time.perf_counter() - started) / 60:.1f} minutes; load average at the end "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
