"""``flextui launch --record-profile``: the launch's measured task times into the
in-run profile cache (``runtime.recording``), so a ``--cost recorded`` search uses them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console

from flextui.errors import FlextuiError
from flextui.runtime.metrics import RankRecord

if TYPE_CHECKING:
    from flextui.runtime.launch import Outcome


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record-profile", action="store_true",
                   help="time every task on the ranks and write the times into the in-run "
                   "profile cache (in-run/ in --profiles DIR), kept apart from the "
                   "profiler's: a --cost recorded search uses them (on a GPU each task's "
                   "time costs a pair of CUDA events)")


def check(args: argparse.Namespace) -> None:
    """Before anything starts: the profile directory can be written, and the launch
    trains (a check's float64 steps are no profile)."""
    if not args.record_profile:
        return
    from flextui.runtime.recording import check_recording
    if args.check:
        raise FlextuiError("--record-profile records a training run's task times; leave "
                           "out --check")
    if args.precision not in (None, "fp32"):
        raise FlextuiError("--record-profile records the task times of a float32 run; "
                           f"leave out --precision {args.precision}")
    check_recording(args.profiles)


def record(args: argparse.Namespace, graph, outcome: Outcome, records: list[RankRecord],
           console: Console) -> dict[str, Any]:
    """A finished run's task times into the cache; what was written, for --json."""
    from flextui.runtime.launch import RunStatus
    if not args.record_profile or outcome.status != RunStatus.FINISHED:
        return {}
    from flextui.runtime.recording import record_profile
    written = record_profile(graph, records, args.profiles)
    if not args.json:
        for r in written:
            console.print(f"recorded {r.tasks:,} task times ({r.runs:,} runs) measured on "
                          f"{r.device} into {r.path}", markup=False, highlight=False)
    return {"recorded_profile": [r.to_dict() for r in written]}
