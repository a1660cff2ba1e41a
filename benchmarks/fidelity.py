"""How well the simulator predicts a real run: predicted against measured iteration time
on this machine's CPU, on 2 and 4 ranks (``local-cpu-N``: gloo over loopback).

First it measures what the simulator needs, as ``flextui profile`` does: every task a
search over up to 4 devices may visit, on the CPU with the threads of a launch's rank
(``flextui profile --device cpu``), and gloo's point-to-point and all-reduce times
between two CPU processes (``flextui profile --comm --device cpu``). Then, for every
model and rank count, it simulates and launches (``runtime.job``: torchrun, one process
per rank, as ``flextui launch`` does) several strategies: data parallel, model
parallel, the expert strategy, the best of a short search against the same cost model,
and random ones, each --repeats times (a rank count over this machine's cores is
skipped: a timed launch gives each rank a core of its own). It prints per strategy the
simulated iteration time and the measured one (the mean step of the slowest rank over
the timed steps) of each repetition, then per rank count and repetition the median and
90th-percentile absolute error and Spearman's rank correlation between predicted and
measured, and the spread between repetitions (per strategy, the measured range over
its median).

The models: the library's MLP, LeNet, RNN language model and Transformer, and a
GPT-2-style decoder imported from plain PyTorch (``tests/torch_models/gpt2_decoder.py``),
each at a size where a launch takes seconds.

    python benchmarks/fidelity.py [--profiles DIR] [--steps 10] [--repeats 3]
        [--ranks 2 4] [--models mlp,lenet]

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

#: small options, so that a launch takes seconds; a model file is loaded from its path
IMPORTED = Path(__file__).resolve().parent.parent / "tests" / "torch_models" / "gpt2_decoder.py"
MODELS: dict[str, dict[str, int]] = {
    "mlp": {"batch_size": 64, "in_features": 1024, "width": 1024, "layers": 4},
    "lenet": {"batch_size": 64},
    "rnnlm": {"batch_size": 32, "steps": 4, "layers": 2, "hidden": 256, "vocab": 2000},
    "transformer": {"batch_size": 8, "layers": 2, "width": 256, "heads": 4, "seq_len": 64,
                    "vocab": 2000},
    "gpt2_decoder": {},
}
RANK_COUNTS = (2, 4)
BUILTINS = ("data-parallel", "model-parallel", "expert")
RANDOM_SEEDS = (1, 2)
SEARCH_BUDGET = "3000"   # iterations of a short search
#: timed runs per message size: the 2-core machine stalls a rank now and then, and a
#: median of 10 was once a stall (a 4 KiB all-reduce at 2.1 ms against 0.3 ms)
COMM_REPEATS = 30


@dataclass
class Row:
    ranks: int
    repeat: int
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
    p.add_argument("--steps", type=int, default=10, help="timed steps per launch")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=3, help="launches of each strategy")
    p.add_argument("--ranks", type=int, nargs="+", default=list(RANK_COUNTS),
                   choices=RANK_COUNTS, help="rank counts (default 2 4)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {', '.join(MODELS)}")
    return p.parse_args()


def main() -> None:
    args = parse()
    started = time.monotonic()
    print(f"{time.strftime('%Y-%m-%d')}, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the start; measured times "
          "are only as good as the machine is idle")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    from flextui.machine.detect import usable_cpus
    cores = usable_cpus()
    for count in [r for r in args.ranks if r > cores]:   # the runtime's rule: a core a rank
        print(f"{count} ranks: skipped, a timed launch gives each rank a core of its own and "
              f"this machine has {cores}")
    rank_counts = [r for r in args.ranks if r <= cores]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="flextui-fidelity-") as tmp:
        profiles = args.profiles or str(Path(tmp) / "profiles")
        calibrate(profiles)
        for name in models:
            for ranks in rank_counts:
                rows += measure_model(name, ranks, profiles, Path(tmp), args)
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
    for calibration in measure_comm(["cpu"] * 2, repeats=COMM_REPEATS):
        save_calibration(calibration, profiles)
    print(f"gloo loopback: calibrated in {time.monotonic() - t:.0f} s")


def load(name: str):
    from flextui.graph.library import load_model
    return load_model(str(IMPORTED) if name == "gpt2_decoder" else name, **MODELS[name])


def measure_model(name: str, ranks: int, profiles: str, tmp: Path,
                  args: argparse.Namespace) -> list[Row]:
    from flextui.cost.choose import choose_cost_model
    from flextui.cost.profile import prepare_profile
    from flextui.machine.detect import cpu_ranks
    from flextui.runtime import job
    from flextui.runtime.spec import Training

    graph = load(name)
    cluster = cpu_ranks(ranks)
    run = prepare_profile(graph, max(RANK_COUNTS), device="cpu", profiles=profiles)
    t = time.monotonic()
    measured = run.run()
    if measured:
        print(f"{name}: {len(run.signatures)} tasks, {measured} profiled on {run.local.name} "
              f"in {time.monotonic() - t:.0f} s")
    cost_model = choose_cost_model(graph, cluster, "profiled", profiles=profiles).model
    training = Training(steps=args.steps, warmup=args.warmup)
    rows = []
    for strategy in strategies(graph, cluster, cost_model):
        for repeat in range(args.repeats):
            prepared = job.prepare(graph, strategy, cluster, training, cost_model,
                                   run_log=tmp / f"{name}-{ranks}-{strategy.name}-{repeat}.ffrun")
            outcome, summary, _ = job.execute(prepared, threading.Event())
            if outcome.status != "finished":
                sys.exit(f"{name} under {strategy.name} on {ranks} ranks: {outcome.message}")
            rows.append(Row(ranks, repeat, name, strategy.name, prepared.simulated.iteration_s,
                            summary.iteration_s))
        mine = rows[-args.repeats:]
        print(f"  {ranks} ranks {strategy.name:<16} predicted {mine[0].predicted_s * 1e3:8.2f} ms, "
              f"measured {', '.join(f'{r.measured_s * 1e3:.2f}' for r in mine)} ms", flush=True)
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


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile, linear between the order statistics (numpy's default)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def report(rows: list[Row]) -> None:
    print()
    print(f"{'ranks':>5} {'model':<13} {'strategy':<16} {'predicted ms':>12} "
          f"{'measured ms (each repetition)':<32} {'error':>8}")
    groups: dict[tuple[int, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.ranks, r.model, r.strategy), []).append(r)
    for (ranks, model, strategy), mine in groups.items():
        errors = ", ".join(f"{r.error:+.0%}" for r in mine)
        print(f"{ranks:>5} {model:<13} {strategy:<16} {mine[0].predicted_s * 1e3:12.2f} "
              f"{', '.join(f'{r.measured_s * 1e3:.2f}' for r in mine):<32} {errors}")
    print(f"\n{'ranks':>5} {'repetition':>10} {'strategies':>10} {'median |error|':>15} "
          f"{'p90 |error|':>12} {'Spearman':>9}")
    for count in sorted({r.ranks for r in rows}):
        for repeat in sorted({r.repeat for r in rows}):
            mine = [r for r in rows if r.ranks == count and r.repeat == repeat]
            if len(mine) < 2:
                continue
            errors = [abs(r.error) for r in mine]
            rho = spearman([r.predicted_s for r in mine], [r.measured_s for r in mine])
            print(f"{count:>5} {repeat + 1:>10} {len(mine):>10} "
                  f"{statistics.median(errors):>15.1%} {percentile(errors, 0.9):>12.1%} "
                  f"{rho:>9.3f}")
        spreads = [(max(m) - min(m)) / statistics.median(m) for m in
                   ([r.measured_s for r in g] for (k, _, _), g in groups.items() if k == count)
                   if len(m) > 1]
        if spreads:
            print(f"{count:>5} ranks: spread between repetitions (range over median, per "
                  f"strategy): median {statistics.median(spreads):.1%}, largest "
                  f"{max(spreads):.1%}")
    print("goal: median |error| <= 10%, p90 <= 25%, Spearman >= 0.9 on each rank count")


if __name__ == "__main__":
    main()
