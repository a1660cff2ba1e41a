"""Where a step's time goes: one launch that records its task times
(``flextui launch --record-profile``), op by op against the profiler's times of the same
tasks measured alone (what the simulator predicted from), and each rank's step cut
into its tasks, the rest of its compute (the batch it makes, inputs assembled outside a
kernel, the optimizer update), waiting on communication and what is in none of them;
beside it, the simulated device's compute, all-reduces, transfers and updates. Last,
the prediction again from the run's own task times (``--cost recorded``).

    python benchmarks/where_time_goes.py [--model rnnlm] [--strategy data-parallel]
        [--ranks 2] [--steps 10] [--profiles DIR]

The models are ``fidelity.py``'s; profiles and the gloo calibration go to a temporary
directory unless ``--profiles DIR`` names one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from fidelity import MODELS, calibrate, load


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="rnnlm", choices=list(MODELS))
    p.add_argument("--strategy", default="data-parallel",
                   help="a built-in strategy (data-parallel, model-parallel, expert)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--profiles", metavar="DIR", help="profile directory (default: a "
                   "temporary one, measured afresh)")
    return p.parse_args()


def main() -> None:
    args = parse()
    print(f"{time.strftime('%Y-%m-%d')}, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the start")
    with tempfile.TemporaryDirectory(prefix="flextui-time-") as tmp:
        profiles = args.profiles or str(Path(tmp) / "profiles")
        calibrate(profiles)
        run(args, profiles, Path(tmp))


def run(args: argparse.Namespace, profiles: str, tmp: Path) -> None:
    from flextui.cost.choose import choose_cost_model
    from flextui.cost.profile import prepare_profile
    from flextui.machine.detect import cpu_ranks
    from flextui.runtime import job
    from flextui.runtime.metrics import Steps, Tasks
    from flextui.runtime.recording import record_profile
    from flextui.runtime.spec import Training
    from flextui.sim import Simulator
    from flextui.strategy import builtin_strategy

    graph = load(args.model)
    cluster = cpu_ranks(args.ranks)
    prepare_profile(graph, args.ranks, device="cpu", profiles=profiles).run()
    alone = choose_cost_model(graph, cluster, "profiled", profiles=profiles).model
    strategy = builtin_strategy(args.strategy, graph, cluster)
    timeline = Simulator(graph, cluster, alone).simulate(strategy)
    prepared = job.prepare(graph, strategy, cluster,
                           Training(steps=args.steps, warmup=2, record_tasks=True), alone,
                           run_log=tmp / "run.ffrun")
    outcome, summary, records = job.execute(prepared, threading.Event())
    if outcome.status != "finished":
        sys.exit(f"the launch did not finish: {outcome.message}")
    print(f"{args.model}, {args.strategy} on {args.ranks} CPU ranks: predicted "
          f"{timeline.makespan * 1e3:.2f} ms from the profiler's times, measured "
          f"{summary.iteration_s * 1e3:.2f} ms (the slowest rank's mean step)\n")

    measured: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in records:
        if isinstance(r, Tasks):
            for row in r.tasks:
                name = graph.ops[row.op].name
                measured[r.rank][name] += (row.forward_s + (row.backward_s or 0.0)) \
                    * row.runs / r.steps
    steps: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in records:
        if isinstance(r, Steps) and not r.warmup:
            total = steps[r.rank]
            total[0] += r.step_s
            total[1] += r.compute_s
            total[2] += r.wait_s
            total[3] += r.count
    for rank in sorted(measured):
        simulated = per_op(timeline, cluster.devices[rank].name)
        print(f"rank {rank}, ms a step (forward + backward of the op's tasks there)")
        print(f"  {'op':<24} {'alone':>8} {'in run':>8} {'ratio':>6}")
        names = sorted(set(simulated) | set(measured[rank]),
                       key=lambda n: -measured[rank].get(n, 0.0))
        for name in names:
            a, m = simulated.get(name, 0.0), measured[rank].get(name, 0.0)
            print(f"  {name:<24} {a * 1e3:8.3f} {m * 1e3:8.3f} "
                  f"{m / a if a else float('nan'):6.2f}")
        a, m = sum(simulated.values()), sum(measured[rank].values())
        print(f"  {'all tasks':<24} {a * 1e3:8.3f} {m * 1e3:8.3f} {m / a if a else 0:6.2f}")
        step_s, compute_s, wait_s, count = steps[rank]
        step_s, compute_s, wait_s = step_s / count, compute_s / count, wait_s / count
        print(f"  measured step {step_s * 1e3:.2f} = tasks {m * 1e3:.2f} + other compute "
              f"(batch, assembly outside kernels, update) {(compute_s - m) * 1e3:.2f} + "
              f"waiting on communication {wait_s * 1e3:.2f} + in none "
              f"{(step_s - compute_s - wait_s) * 1e3:.2f}")
        print(f"  simulated {describe(timeline, cluster.devices[rank].name)}\n")
    written = record_profile(graph, records, profiles)
    recorded = choose_cost_model(graph, cluster, "recorded", profiles=profiles).model
    again = Simulator(graph, cluster, recorded).simulate(strategy)
    print(f"from the run's own task times ({len(written)} in-run profile written): predicted "
          f"{again.makespan * 1e3:.2f} ms against {summary.iteration_s * 1e3:.2f} measured "
          f"({again.makespan / summary.iteration_s - 1:+.0%}; from the profiler's "
          f"{timeline.makespan / summary.iteration_s - 1:+.0%})")


def per_op(timeline, device: str) -> dict[str, float]:
    """Seconds of forward and backward tasks per op on ``device``."""
    from flextui.sim import TaskKind

    out: dict[str, float] = defaultdict(float)
    for t in timeline.tasks:
        if t.kind in (TaskKind.FORWARD, TaskKind.BACKWARD) and device in t.resources:
            out[t.op] += t.end - t.start
    return out


def describe(timeline, device: str) -> str:
    """The simulated device's time by what holds it."""
    from flextui.sim import TaskKind

    held: dict[TaskKind, float] = defaultdict(float)
    for t in timeline.tasks:
        if device in t.resources:
            held[t.kind] += t.end - t.start
    busy = sum(held.values())
    return (f"iteration {timeline.makespan * 1e3:.2f}: compute "
            f"{(held[TaskKind.FORWARD] + held[TaskKind.BACKWARD]) * 1e3:.2f}, all-reduces "
            f"{held[TaskKind.SYNC] * 1e3:.2f}, transfers {held[TaskKind.TRANSFER] * 1e3:.2f}, "
            f"updates {held[TaskKind.UPDATE] * 1e3:.2f} holding the device, idle "
            f"{(timeline.makespan - busy) * 1e3:.2f}")


if __name__ == "__main__":
    main()
