"""The ``flextui`` command line. Each subcommand calls the core and renders its plain
data as rich tables, or as JSON with ``--json`` (the shapes are documented in the
README). Errors the user can cause print one message and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rich.console import Console

from flextui import __version__
from flextui.cli import launch, profile, replay, runs, search
from flextui.cli.common import cluster_arg, cost_args, interactive, memory_arg, model_args
from flextui.cli.show import cmd_clusters, cmd_models, cmd_show
from flextui.cli.simulate import cmd_simulate
from flextui.errors import FlextuiError

INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flextui",
        description="Find fast parallelization strategies for deep networks on GPU clusters.")
    parser.add_argument("--version", action="version", version=f"flextui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("models", help="list the built-in models and their options")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_models)

    p = sub.add_parser("clusters", help="list the built-in clusters, or describe this machine")
    p.add_argument("--detect", action="store_true", help="describe the local machine (GPUs or CPU)")
    p.add_argument("--cpu-ranks", type=int, metavar="N",
                   help="with --detect: describe N CPU processes of this machine (the cluster "
                   "local-cpu-N a CPU launch runs on) and the measured figures --cost profiled "
                   "would use for it")
    p.add_argument("--profiles", metavar="DIR", help="with --cpu-ranks: the profile directory "
                   "(default $FLEXTUI_PROFILES, else the user's cache directory)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_clusters)

    p = sub.add_parser("show", help="show a model's ops and parallel dims, or validate a strategy",
                       description="Without --strategy: the model's ops, output shapes, parallel "
                       "dims (S/A/P) and FLOPs. With --strategy: validate it against the model "
                       "and cluster and print each op's degrees and devices.")
    model_args(p)
    p.add_argument("--strategy", "-s", metavar="FILE|NAME",
                   help="a strategy .json file, or data-parallel, model-parallel, expert, random")
    cluster_arg(p)
    p.add_argument("--export", metavar="FILE", help="write the strategy to FILE as JSON")
    p.add_argument("--limit", type=int, default=40, help="rows to print (0: all; default 40)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("simulate", help="simulate one iteration of a strategy",
                       description="Simulate one training (or inference) iteration of a model "
                       "under a strategy on a cluster (analytic or profiled task times): iteration "
                       "time, throughput, per-device utilisation and memory, communication, "
                       "and the ops that take the longest.")
    model_args(p)
    p.add_argument("--strategy", "-s", default="data-parallel", metavar="FILE|NAME",
                   help="a strategy .json file, or data-parallel (default), model-parallel, "
                   "expert, random")
    cluster_arg(p)
    p.add_argument("--inference", action="store_true", help="forward pass only")
    memory_arg(p)
    cost_args(p)
    p.add_argument("--trace", metavar="FILE", help="write the timeline as Chrome trace JSON")
    p.add_argument("--top", type=int, default=10, help="how many top ops to list")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_simulate)
    search.add_parser(sub)
    replay.add_parser(sub)
    profile.add_parser(sub)
    launch.add_parser(sub)
    runs.add_parser(sub)
    return parser


def open_app(args: argparse.Namespace, console: Console) -> int:
    from flextui.tui.app import run_app
    return run_app(replay=getattr(args, "log", None))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable | None = getattr(args, "handler", None)
    if handler is None:
        if not interactive():
            parser.print_help()
            return 0
        handler = open_app
    try:
        return handler(args, Console()) or 0
    except FlextuiError as exc:
        print(f"flextui: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:   # a second Ctrl-C, while the work was saving what it had
        print("flextui: interrupted", file=sys.stderr)
        return INTERRUPTED
