"""How well the simulator predicts a real run: predicted against measured iteration time
on this machine's CPU, 2 ranks (``local-cpu-2``: gloo over loopback).

First it measures what the simulator needs, as ``flextui profile`` does: every task a
search over 2 devices may visit, on the CPU with the threads of a launch's rank
(``flextui profile --device cpu``), and gloo's point-to-point and all-reduce times
between two CPU processes (``flextui profile --comm --device cpu``). Then, for every
model, it simulates and launches (``runtime.job``: torchrun, one process per rank, as
``flextui launch`` does) several strategies: data parallel, model parallel, the expert
strategy, the best of a short search against the same cost model, and random ones; and
prints per strategy the simulated iteration time, the measured one (the mean step of
the slowest rank over the timed steps) and the error, then the median absolute error
and Spearman's rank correlation between predicted and measured.

    python benchmarks/fidelity.py [--profiles DIR] [--steps 20] [--models mlp,lenet]

Profiles and the calibration go to a temporary directory unless ``--profiles DIR``
names one (then what is there already is used, not measured again).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

RANKS = 2
#: small options, so that a launch takes seconds
MODELS: dict[str, dict[str, int]] = {
    "mlp": {"batch_size": 64, "in_features": 1024, "width": 1024, "layers": 4},
    "lenet": {"batch_size": 64},
    "rnnlm": {"batch_size": 32, "steps": 4, "layers": 2, "hidden": 256, "vocab": 2000},
    "transformer": {"batch_size": 8, "layers": 2, "width": 256, "heads": 4, "seq_len": 64,
                    "vocab": 2000},
}
BUILTINS = ("data-parallel", "model-parallel", "expert")
RANDOM_SEEDS = (1, 2)
SEARCH_BUDGET = "3000"   # iterations of a short search
#: timed runs per message size: the 2-core machine stalls a rank now and then, and a
#: median of 10 was once a stall (a 4 KiB all-reduce at 2.1 ms against 0.3 ms)
COMM_REPEATS = 30


@dataclass
class Row:
    model: str
    strategy: str
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profiles", metavar="DIR", help="profile directory (default: a "
                   "temporary one, measured afresh)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per launch")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {', '.join(MODELS)}")
    return p.parse_args()


def main() -> None:
    args = parse()
    started = time.monotonic()
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at the start; "
          "measured times are only as good as the machine is idle")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory(prefix="flextui-fidelity-") as tmp:
        profiles = args.profiles or str(Path(tmp) / "profiles")
        calibrate(profiles)
        rows: list[Row] = []
        for name in models:
            rows += measure_model(name, profiles, Path(tmp), args.steps, args.warmup)
    report(rows)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"took {time.monotonic() - started:.0f} s (load average now {load})")


def calibrate(profiles: str) -> None:
    """gloo between two CPU processes, unless ``profiles`` has a calibration of it."""
    from flextui.cost.calibration import load_calibrations, save_calibration
    from flextui.cost.comm import measure_comm
    if any(c.link_kind == "loopback" for c in load_calibrations(profiles, "cpu")):
        print(f"gloo loopback: calibrated already in {profiles}")
        return
    t = time.monotonic()
    for calibration in measure_comm(["cpu"] * RANKS, repeats=COMM_REPEATS):
        save_calibration(calibration, profiles)
    print(f"gloo loopback: calibrated in {time.monotonic() - t:.0f} s")


def measure_model(name: str, profiles: str, tmp: Path, steps: int, warmup: int) -> list[Row]:
    from flextui.cost.choose import choose_cost_model
    from flextui.cost.profile import prepare_profile
    from flextui.graph.library import load_model
    from flextui.machine.detect import cpu_ranks
    from flextui.runtime import job
    from flextui.runtime.spec import Training

    graph = load_model(name, **MODELS[name])
    cluster = cpu_ranks(RANKS)
    run = prepare_profile(graph, RANKS, device="cpu", profiles=profiles)
    t = time.monotonic()
    measured = run.run()
    print(f"{name}: {len(run.signatures)} tasks, {measured} profiled on {run.local.name} in "
          f"{time.monotonic() - t:.0f} s")
    cost_model = choose_cost_model(graph, cluster, "profiled", profiles=profiles).model
    training = Training(steps=steps, warmup=warmup)
    rows = []
    for strategy in strategies(graph, cluster, cost_model):
        prepared = job.prepare(graph, strategy, cluster, training, cost_model,
                               run_log=tmp / f"{name}-{strategy.name}.ffrun")
        outcome, summary, _ = job.execute(prepared, threading.Event())
        if outcome.status != "finished":
            sys.exit(f"{name} under {strategy.name}: {outcome.message}")
        rows.append(Row(name, strategy.name, prepared.simulated["iteration_s"],
                        summary.iteration_s))
        print(f"  {strategy.name:<16} predicted {rows[-1].predicted_s * 1e3:8.2f} ms, "
              f"measured {rows[-1].measured_s * 1e3:8.2f} ms", flush=True)
    return rows


def strategies(graph, cluster, cost_model) -> list:
    """The built-in strategies, a short search's best and random ones, each distinct."""
    from flextui.search.options import search_options
    from flextui.search.runner import run_search
    from flextui.strategy import Strategy, builtin_strategy
    from flextui.strategy.builtins import random_strategy

    found = [builtin_strategy(s, graph, cluster) for s in BUILTINS]
    result = run_search(graph, cluster, cost_model, search_options(SEARCH_BUDGET, seed=0))
    found.append(Strategy(result.best, "searched"))
    found += [random_strategy(graph, cluster, seed) for seed in RANDOM_SEEDS]
    distinct: dict[tuple, Strategy] = {}
    for strategy in found:
        shape = tuple((c.degrees, c.devices) for c in
                      (strategy[op.name] for op in graph.ops))
        if shape in distinct:
            print(f"  {strategy.name:<16} is {distinct[shape].name}: listed once")
        else:
            distinct[shape] = strategy
    return list(distinct.values())


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks (ties averaged)."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else float("nan")


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    found = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            found[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return found


def report(rows: list[Row]) -> None:
    print()
    print(f"{'model':<12} {'strategy':<16} {'predicted ms':>12} {'measured ms':>12} "
          f"{'error':>8}")
    for r in rows:
        print(f"{r.model:<12} {r.strategy:<16} {r.predicted_s * 1e3:12.2f} "
              f"{r.measured_s * 1e3:12.2f} {r.error:+8.1%}")
    if len(rows) < 2:
        return
    errors = [abs(r.error) for r in rows]
    rho = spearman([r.predicted_s for r in rows], [r.measured_s for r in rows])
    print(f"\n{len(rows)} strategies over {len({r.model for r in rows})} models: median "
          f"absolute error {statistics.median(errors):.1%}, Spearman rank correlation "
          f"{rho:.3f} (goal: <= 10%, >= 0.9)")


if __name__ == "__main__":
    main()
