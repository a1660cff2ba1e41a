"""Search quality: what the MCMC search finds within a budget, and how fast.

Part 1, for the paper's six models on its P100 cluster at 4 and 16 GPUs (p100-4x4 with
1 and 4 nodes): the simulated iteration time of data parallelism, of the expert
strategy and of the best strategy the search found within the budget (one chain, seed
0, starting from the faster of the two), the speedup over the better baseline, the
compute-work lower bound on any strategy's time (``search.compute_bound``: a best close to
it leaves little to find), and the wall time the search took to reach 99% of its final
improvement. The batch is the model's default (the paper's per-GPU batch on 1 GPU), or
with ``--weak-scaling`` that much per GPU, as in the paper's experiments.

Part 2, for LeNet and RNNLM-2 on 4 GPUs: the true optimum (exhaustive search), and for
each of several seeds the wall time MCMC (one chain, or ``--workers`` chains in
parallel, each chain's time counted from its own start) took to first reach it; when the
exhaustive search runs out of time, the best it knows and its proven lower bound.

    python benchmarks/search_quality.py [--budget 60s] [--models nmt] [--devices 16]
                                        [--weak-scaling]
                                        [--skip-exhaustive | --only-exhaustive]
"""

from __future__ import annotations

import argparse
import time

from flextui.cost import AnalyticCostModel
from flextui.graph.library import load_model, model_info
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions, parse_budget, run_search
from flextui.search.compute_bound import work_lower_bound
from flextui.search.exhaustive.search import exhaustive_search
from flextui.search.summary import baseline_costs

PAPER_MODELS = ["alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt"]


def p100(devices: int):
    return load_named_cluster("p100-4x4", nodes=devices // 4)


def time_to_fraction(events, initial: float, best: float, fraction: float) -> float:
    """Elapsed time at which the best cost first came within ``1 - fraction`` of the
    final improvement (0 when there was no improvement)."""
    target = initial - fraction * (initial - best)
    return next((e.elapsed for e in events if e.best <= target), 0.0)


def search(graph, cluster, options: SearchOptions):
    events = []
    result = run_search(graph, cluster, AnalyticCostModel(), options, on_events=events.extend)
    return result, events


def quality(models: list[str], devices: list[int], budget: str, weak: bool) -> None:
    iterations, seconds = parse_budget(budget)
    options = SearchOptions(iterations=iterations, time_limit=seconds, converge=False)
    print(f"{'model':<14}{'GPUs':>5}{'batch':>6}{'DP (ms)':>10}{'expert':>10}{'best':>10}"
          f"{'speedup':>9}{'bound':>9}{'steps':>8}{'t99 (s)':>9}")
    for name in models:
        for n in devices:
            graph = load_model(name, batch_size=model_info(name).defaults["batch_size"] * n) \
                if weak else load_model(name)
            cluster = p100(n)
            base = baseline_costs(graph, cluster, AnalyticCostModel(), options)
            bound = work_lower_bound(graph, cluster, AnalyticCostModel())
            result, events = search(graph, cluster, options)
            better = min(base.values())
            t99 = time_to_fraction(events, result.initial_cost, result.best_cost, 0.99)
            print(f"{name:<14}{n:>5}{graph.batch_size:>6}{base['data-parallel'] * 1e3:>10.2f}"
                  f"{base['expert'] * 1e3:>10.2f}{result.best_cost * 1e3:>10.2f}"
                  f"{better / result.best_cost:>8.2f}x{bound * 1e3:>9.2f}"
                  f"{result.iterations:>8}{t99:>9.1f}", flush=True)


def optimum(models: list[str], time_limit: float, budget: str, seeds: int,
            workers: int) -> None:
    """MCMC first (``workers`` chains per seed, one process each when more than one),
    then the exhaustive search seeded with the best MCMC found as its first bound to beat
    (the optimum it returns is the same; proving it is faster); then how many seeds'
    searches reached the optimum, and when."""
    print(f"\n{'model':<10}{'optimum (ms)':>13}{'bound (ms)':>11}{'exhaustive (s)':>15}"
          f"{'seeds hit':>10}   MCMC hit at (s), seeds 0..{seeds - 1}")
    iterations, seconds = parse_budget(budget)
    for name in models:
        graph, cluster = load_model(name), p100(4)
        runs = [search(graph, cluster, SearchOptions(iterations=iterations, time_limit=seconds,
                                                     seed=seed, chains=workers, converge=False))
                for seed in range(seeds)]
        best = min((result for result, _ in runs), key=lambda r: r.best_cost)
        start = time.perf_counter()
        exact = exhaustive_search(graph, cluster, AnalyticCostModel(), upper_bound=best.best,
                                  time_limit=time_limit)
        took = time.perf_counter() - start
        hits = [min((e.elapsed for e in events if e.best <= exact.cost * (1 + 1e-9)), default=None)
                for _, events in runs]
        found = sum(h is not None for h in hits)
        label = "" if exact.complete else " (exhaustive search incomplete)"
        times = " ".join("-" if h is None else f"{h:.2f}" for h in hits)
        print(f"{name:<10}{exact.cost * 1e3:>13.6f}{exact.bound * 1e3:>11.6f}{took:>15.1f}"
              f"{found:>7}/{seeds:<2}   {times}{label}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=PAPER_MODELS)
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--budget", default="60s", help="per search (default 60s)")
    parser.add_argument("--weak-scaling", action="store_true",
                        help="part 1 with the model's batch size per GPU, as in the paper "
                             "(64 per GPU, 256 for AlexNet); default: the model's batch in all")
    parser.add_argument("--optimum-budget", default="3s", help="MCMC budget per seed in part 2")
    parser.add_argument("--seeds", type=int, default=8, help="MCMC seeds in part 2")
    parser.add_argument("--workers", type=int, default=1,
                        help="MCMC chains per seed in part 2, one process each")
    parser.add_argument("--exhaustive-limit", type=float, default=600.0)
    parser.add_argument("--skip-exhaustive", action="store_true")
    parser.add_argument("--only-exhaustive", action="store_true")
    args = parser.parse_args()
    if not args.only_exhaustive:
        quality(args.models, args.devices, args.budget, args.weak_scaling)
    if not args.skip_exhaustive:
        optimum(["lenet", "rnnlm2"], args.exhaustive_limit, args.optimum_budget, args.seeds,
                args.workers)


if __name__ == "__main__":
    main()
