"""``flextui launch --against-dp``: after the strategy's run, data parallelism on the
same ranks when the strategy was predicted faster than it, and the measured speedup
beside the predicted one; a predicted gain that measures as a loss is printed in red."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console

from flextui.errors import FlextuiError
from flextui.runtime.metrics import RankRecord
from flextui.session.against_dp import AgainstDataParallel

if TYPE_CHECKING:
    from flextui.runtime.job import Prepared
    from flextui.runtime.summary import RunSummary
    from flextui.session.launching import LaunchRequest

class Sink(Protocol):
    """What the ranks' records and lines go to while the data-parallel run goes on."""

    def record(self, record: RankRecord) -> None: ...

    def output(self, rank: int, line: str) -> None: ...


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against-dp", action="store_true",
                   help="after the run, when the strategy was predicted faster than data "
                   "parallelism, run data parallelism on the same ranks and print the "
                   "measured speedup beside the predicted one")


def check(args: argparse.Namespace) -> None:
    if args.against_dp and args.check:
        raise FlextuiError("--against-dp measures a training run against data parallelism; "
                           "leave out --check")


def compare(args: argparse.Namespace, request: LaunchRequest, summary: RunSummary,
            stop: threading.Event, console: Console,
            progress: Callable[[Prepared], Sink]) -> dict[str, Any]:
    """With --against-dp, the comparison (for --json; {} without it), said as it goes
    (on stderr with --json, whose stdout is the JSON alone)."""
    if not args.against_dp:
        return {}
    from flextui.runtime import job
    from flextui.runtime.launch import RunStatus

    def say(text: str, style: str = "") -> None:
        if args.json:
            print(text, file=sys.stderr)
        else:
            console.print(text, style=style, markup=False, highlight=False)

    strategy_s = request.prepared.simulated.iteration_s
    if request.baseline is None:
        say("--against-dp: the strategy is data parallelism; nothing to compare")
        return {"against_dp": None}
    data_parallel = request.baseline(stop).prepared
    if not strategy_s < data_parallel.simulated.iteration_s:
        result = AgainstDataParallel.of(strategy_s, summary.iteration_s,
                                        data_parallel.simulated.iteration_s, None)
        say(f"--against-dp: not predicted faster than data parallelism "
            f"({strategy_s * 1e3:.2f} ms against {data_parallel.simulated.iteration_s * 1e3:.2f}"
            " ms simulated): no data-parallel run")
        return {"against_dp": result.to_dict()}
    say(f"launching data parallelism on the same ranks to compare; run log "
        f"{data_parallel.run_log}")
    sink = progress(data_parallel)
    outcome, measured, _ = job.execute(data_parallel, stop, sink.record, sink.output)
    finished = outcome.status == RunStatus.FINISHED
    if not finished:
        say(f"the data-parallel run did not finish: {outcome.message}", "bold red")
    result = AgainstDataParallel.of(strategy_s, summary.iteration_s,
                                    data_parallel.simulated.iteration_s,
                                    measured.iteration_s if finished else None)
    say(result.describe(), "bold red" if result.contradicted else "bold")
    return {"against_dp": {**result.to_dict(), "data_parallel_run_log":
                           str(data_parallel.run_log)}}
