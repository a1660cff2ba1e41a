"""Search throughput: proposals per second of a timed search, beside the paper's Table 5.

For each of the paper's six models on the paper's P100 cluster (p100-4x4 resized to
nodes of 4 GPUs) at 16 and 64 GPUs: one `flextui search`-like run (one chain, default
options, analytic task times, the search log written to a temporary directory) with
a time budget of --budget seconds and early stopping off, so it runs the whole budget.
Printed per run: the proposals made and proposals per second (over the search's own
elapsed time); the wall time run_search took, against the budget; when the chain found
its final best and how much faster than the initial strategy that best is; and the
end-to-end search times of FlexFlow's simulator, full and delta, from the paper's
Table 5 for the same model and GPU count (its searches ran to convergence under a
30-minute budget).

With --converge the searches stop by the stop rule (no improvement for half the
iterations so far, as ``flextui search`` does by default) within the budget, and the
wall time is the time to converge, to set beside the paper's delta column. The
"per s x ref" column is proposals a second times the fixed reference work's time
(``reference.py``), a figure that drifts less with the machine's load.

    python benchmarks/search_throughput.py [--budget 60] [--devices 16 64] [--models nmt]
        [--converge]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from reference import reference_s

from flextui.cost import AnalyticCostModel
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions, StepEvent, run_search

CLUSTER = "p100-4x4"
GPUS_PER_NODE = 4

#: The paper's Table 5: end-to-end search time in seconds, (full, delta simulation),
#: per GPU count, for the models in TABLE5_MODELS order.
TABLE5_MODELS = ["alexnet", "resnet101", "inception_v3", "rnntc", "rnnlm", "nmt"]
TABLE5: dict[int, list[tuple[float, float]]] = {
    4: [(0.11, 0.04), (1.4, 0.4), (14, 4.1), (16, 7.5), (21, 9.2), (40, 16)],
    8: [(0.40, 0.13), (4.5, 1.4), (66, 17), (91, 39), (76, 31), (178, 65)],
    16: [(1.4, 0.48), (22, 7.3), (388, 77), (404, 170), (327, 121), (998, 328)],
    32: [(5.3, 1.8), (107, 33), (1746, 298), (1358, 516), (1102, 342), (2698, 701)],
    64: [(18, 5.9), (515, 158), (8817, 1278), (4404, 1489), (3406, 969), (8982, 2190)],
}
PAPER_MODELS = ["alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt"]


class BestTime:
    """When the chain's best cost last improved (s since the chain started)."""

    def __init__(self) -> None:
        self.best, self.at = float("inf"), 0.0

    def __call__(self, events: list[StepEvent]) -> None:
        for event in events:
            if event.best < self.best:
                self.best, self.at = event.best, event.elapsed

    def found_at(self, initial_cost: float) -> float:
        """0 when no step beat the initial strategy."""
        return self.at if self.best < initial_cost else 0.0


def paper(model: str, devices: int) -> str:
    if devices not in TABLE5:
        return f"{'-':>10}{'-':>10}"
    full, delta = TABLE5[devices][TABLE5_MODELS.index(model)]
    return f"{full:>10g}{delta:>10g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per search")
    parser.add_argument("--devices", type=int, nargs="+", default=[16, 64],
                        help=f"GPUs, a multiple of {GPUS_PER_NODE} (a node)")
    parser.add_argument("--models", nargs="+", default=PAPER_MODELS, choices=PAPER_MODELS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--converge", action="store_true",
                        help="stop by the stop rule (the budget is then a cap)")
    args = parser.parse_args()
    if any(d < GPUS_PER_NODE or d % GPUS_PER_NODE for d in args.devices):
        parser.error(f"--devices: give multiples of {GPUS_PER_NODE} (whole nodes of {CLUSTER})")
    options = SearchOptions(time_limit=args.budget, seed=args.seed, converge=args.converge)
    ref = reference_s()
    stop = "stopped by the stop rule, at most" if args.converge else "early stop off"
    print(f"{args.budget:g} s searches (one chain, {stop}) on {CLUSTER} nodes; paper: Table 5 "
          f"end-to-end search time (s); reference work {ref * 1e3:.1f} ms")
    print(f"{'model':<14}{'GPUs':>5}{'proposals':>11}{'per s':>9}{'wall (s)':>10}"
          f"{'over (s)':>10}{'best at (s)':>13}{'speedup':>9}{'paper full':>12}{'delta':>8}"
          f"{'per s x ref':>13}")
    for model in args.models:
        graph = load_model(model)
        for devices in args.devices:
            cluster = load_named_cluster(CLUSTER, nodes=devices // GPUS_PER_NODE)
            best = BestTime()
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                result = run_search(graph, cluster, AnalyticCostModel(), options,
                                    log_path=Path(tmp) / "throughput.ffsearch", on_events=best)
                wall = time.perf_counter() - start
            print(f"{model:<14}{devices:>5}{result.iterations:>11,}"
                  f"{result.iterations / result.elapsed:>9.1f}{wall:>10.1f}"
                  f"{wall - args.budget:>+10.1f}{best.found_at(result.initial_cost):>13.1f}"
                  f"{result.initial_cost / result.best_cost:>8.2f}x{paper(model, devices)}"
                  f"{result.iterations / result.elapsed * ref:>13.2f}", flush=True)
    print(f"reference work at the end: {reference_s() * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
