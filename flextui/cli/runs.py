"""``flextui runs show RUNLOG``: what a launch measured against what the simulator
predicted, per device and overall, read back from its run log (also after a crash)."""

from __future__ import annotations

import argparse

from rich.console import Console

from flextui.cli.common import emit_json
from flextui.fields import printable


def add_arguments(p: argparse.ArgumentParser) -> None:
    runs = p.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)
    show = runs.add_parser("show", help="measured against simulated, per device and overall",
                           description="Print what a launch measured against what the "
                           "simulator predicted for it, per device (busy time: compute per "
                           "step) and overall (iteration time), with the errors, and how the "
                           "run ended. A run log cut short by a killed launcher reads up to "
                           "its last whole record.")
    show.add_argument("log", metavar="RUNLOG", help="a .ffrun file")
    show.add_argument("--output", action="store_true",
                      help="also print every line the ranks and torchrun wrote that was "
                      "not a record (a failed rank's traceback among them)")
    show.add_argument("--json", action="store_true", help="print JSON instead of tables")
    show.set_defaults(handler=cmd_runs_show)


def cmd_runs_show(args: argparse.Namespace, console: Console) -> int:
    from flextui.cli.launch import print_summary
    from flextui.runtime.launch import RunStatus
    from flextui.runtime.runlog import read_run_log, summary_of_log
    from flextui.runtime.stepfigures import RunFigures

    log = read_run_log(args.log)
    summary = summary_of_log(log)
    figures = RunFigures.of(summary, log.records, log.header.spec, log.header.cluster)
    final = log.final
    if args.json:
        emit_json({"run_log": str(log.path), "status": log.status,
                   "message": final.message if final else None, "truncated": log.truncated,
                   **summary.to_dict(), **figures.to_dict(),
                   **({"output": [{"rank": rank, "line": line} for rank, line in log.output]}
                      if args.output else {})})
        return 0
    # what the log says (names, gloo's "[path:line]" in an error) is text, never markup
    header = log.header
    console.print(f"{header.spec.graph.name} ({header.spec.strategy.name or '?'}) on "
                  f"{header.spec.num_ranks} ranks ({header.cluster.name}), {header.created}",
                  markup=False, highlight=False)
    print_summary(summary, console, figures)
    # a rank's words (its last line, what it raised) are data: escaped, never raw
    said = printable(final.message) if final else "the log has no final record"
    finished = final is not None and final.status == RunStatus.FINISHED
    console.print((said if finished else f"{log.status}: {said}")
                  + (" (the log is cut short)" if log.truncated else ""), markup=False,
                  highlight=False)
    if args.output:
        for rank, line in log.output:  # another process's text: escaped
            print(printable(f"[rank {rank}] {line}" if rank >= 0 else line))
    return 0
