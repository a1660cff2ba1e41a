"""The ``flextui`` command line. Each subcommand calls the core and renders its plain
data as rich tables, or as JSON with ``--json`` (the shapes are documented in
docs/json.md). Errors the user can cause print one message and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from flextui import __version__
from flextui.cli.common import interactive
from flextui.errors import FlextuiError
from flextui.fields import printable

if TYPE_CHECKING:
    from rich.console import Console

INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT)


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, and ``module:function``, the function that adds
    its arguments and handler to its parser. Only the command being run is imported, so
    ``flextui --help`` and the light commands start without the simulator's and the
    runtime's imports (numpy, networkx, torch)."""

    help: str
    arguments: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        module, _, function = self.arguments.partition(":")
        getattr(importlib.import_module(module), function)(parser)


COMMANDS: dict[str, Command] = {
    "models": Command("list the built-in models and their options",
                      "flextui.cli.show:models_arguments"),
    "clusters": Command("list the built-in clusters, or describe this machine",
                        "flextui.cli.show:clusters_arguments"),
    "show": Command("show a model's ops and parallel dims, or validate a strategy",
                    "flextui.cli.show:show_arguments"),
    "simulate": Command("simulate one iteration of a strategy",
                        "flextui.cli.simulate:add_arguments"),
    "search": Command("search for a fast strategy (MCMC over the simulator)",
                      "flextui.cli.search:add_arguments"),
    "replay": Command("replay a saved search (.ffsearch)", "flextui.cli.replay:add_arguments"),
    "profile": Command("measure a model's operator tasks on this machine's GPU (or CPU)",
                       "flextui.cli.profile:add_arguments"),
    "launch": Command("train a strategy for real with torchrun and measure it",
                      "flextui.cli.launch:add_arguments"),
    "runs": Command("read the run logs (.ffrun) flextui launch keeps",
                    "flextui.cli.runs:add_arguments"),
    "export": Command("write a strategy as a PyTorch DeviceMesh plan for your own training "
                      "loop", "flextui.cli.export:add_arguments"),
    "export-weights": Command("write a launch's checkpoint as a plain state_dict of your "
                              "module", "flextui.cli.export_weights:add_arguments"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors quote what was typed escaped: an argument holding
    a terminal escape is shown, not acted on by the terminal."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {printable(message)}\n")


def build_parser(configured: Collection[str] = tuple(COMMANDS)) -> argparse.ArgumentParser:
    """The command line; the subcommands not in ``configured`` are listed with their
    help (for ``flextui --help``) but get no arguments."""
    parser = _Parser(
        prog="flextui",
        description="Find fast parallelization strategies for deep networks on GPU clusters.")
    parser.add_argument("--version", action="version", version=f"flextui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, spec in COMMANDS.items():
        p = sub.add_parser(name, help=spec.help)
        if name in configured:
            spec.add_arguments(p)
    return parser


def command_named(argv: Sequence[str]) -> list[str]:
    """The subcommand ``argv`` names, if any: its first word that is not an option (the
    top-level options, --help and --version, take no value)."""
    return [arg for arg in argv if not arg.startswith("-")][:1]


def open_app(args: argparse.Namespace, console: Console) -> int:
    from flextui.tui.app import run_app
    return run_app(replay=getattr(args, "log", None), model=getattr(args, "model", None))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:   # Ctrl-C while starting up, or a second one while the
        print("flextui: interrupted", file=sys.stderr)  # work was saving what it had
        return INTERRUPTED


#: the arguments that name a file or directory (or a built-in by name): each is checked
#: as a path before the command runs, so none that a file cannot have, or that holds a
#: control character (it would be shown back raw: "wrote ..."), gets further
PATHS = ("model", "cluster", "strategy", "init", "log", "out", "resume", "export",
         "export_strategy", "trace", "run_log", "hostfile", "remote_python", "profiles",
         "show", "merge")


def _check_paths(args: argparse.Namespace) -> None:
    from flextui.errors import FieldError
    from flextui.fields import FormFields

    form = FormFields()
    for dest in PATHS:
        value = getattr(args, dest, None)
        for text in value if isinstance(value, list) else [value]:
            try:
                if text is not None:
                    form.path(text, dest)
            except FieldError as e:  # a positional (log) has no flag to name
                raise FlextuiError(str(e) if dest == "log" else e.flag_message) from None


def _run(argv: list[str]) -> int:
    parser = build_parser(command_named(argv))
    args = parser.parse_args(argv)
    handler: Callable | None = getattr(args, "handler", None)
    if handler is None:
        if not interactive():
            parser.print_help()
            return 0
        handler = open_app
    from rich.console import Console
    try:
        _check_paths(args)
        return handler(args, Console()) or 0
    except FlextuiError as exc:   # printable: no message carries a terminal escape
        print(f"flextui: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
