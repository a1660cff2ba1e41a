"""Helpers the subcommands share: loading what the user named, printing JSON and sizes.

The core is imported inside the functions that use it, so a command that needs none
of it (``flextui --help``, ``flextui models``) starts without numpy, networkx or torch."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading
from enum import StrEnum
from typing import Any

from flextui.defaults import DEFAULT_CLUSTER, DEFAULT_MODEL
from flextui.errors import FlextuiError


def model_options(args: argparse.Namespace, devices: int | None = None) -> dict[str, str]:
    """The model's options as typed; its batch is --batch-size, or --batch-per-device
    times ``devices``, the device count of the cluster the command targets (a command
    that offers --batch-per-device gives it)."""
    from flextui.errors import FieldError
    from flextui.session.choices import parse_model_options, per_device_batch
    try:
        batch = args.batch_size
        if getattr(args, "batch_per_device", None) is not None:
            assert devices is not None, "--batch-per-device needs the cluster's device count"
            batch = per_device_batch(args.batch_per_device, devices)
        options = parse_model_options(args.option or [], batch)
    except FieldError as e:
        raise FlextuiError(e.flag_message) from None
    if getattr(args, "opaque", False):
        options["opaque"] = "true"
    return options


def load_graph(args: argparse.Namespace, cluster=None):
    """The graph of the model --model names: its source is made here, once, from what
    the user typed (a model file's path made absolute against this directory, its bytes
    read), and the graph carries it (``OpGraph.source``). ``cluster`` is the one the
    command targets, whose devices --batch-per-device counts (load it first)."""
    from flextui.graph.library import load_model, model_source
    devices = cluster.num_devices if cluster is not None else None
    return load_model(model_source(args.model), **model_options(args, devices))


def interactive() -> bool:
    """A person at a terminal: the app can open."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def emit_json(data: Any) -> None:
    """``data`` as JSON on stdout, always valid JSON: an infinite figure (the cost of a
    strategy ``--memory reject`` rejects) is null; a NaN or -infinity means nothing and
    is refused, naming where it is, before anything is printed."""
    text = json.dumps(_finite(data), indent=2, allow_nan=False)
    sys.stdout.write(text + "\n")


def _finite(value: Any, path: str = "") -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        if value == math.inf:
            return None
        raise FlextuiError(f"cannot print JSON: {path or 'the output'} is {value!r}, which "
                           "JSON cannot hold (a bug in flextui: please report it)")
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def si(value: float, unit: str = "") -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def load_strategy(name: str, graph, cluster, same_graph: bool = False):
    """A built-in strategy by name, or a strategy file, checked against graph and cluster
    (with ``same_graph``, a file must have been made for this graph: its fingerprint).
    A name that is not built in is a file when it exists or looks like a path (a
    ``.json`` suffix or a directory part), so a missing file is reported as missing."""
    from pathlib import Path

    from flextui.fields import FormFields
    from flextui.strategy import BUILTIN_STRATEGIES, builtin_strategy, load_strategy
    if name not in BUILTIN_STRATEGIES:
        FormFields().path(name, "strategy")  # before the file system is asked about it
    path = Path(name)
    if name not in BUILTIN_STRATEGIES and (path.exists() or path.suffix or len(path.parts) > 1):
        return load_strategy(path, graph, cluster, same_graph)
    strategy = builtin_strategy(name, graph, cluster)
    strategy.check(graph, cluster.num_devices)
    return strategy


def model_args(p: argparse.ArgumentParser, default: str | None = DEFAULT_MODEL,
               option_flags: tuple[str, ...] = ("--option", "-o"),
               per_device: str | None = None) -> None:
    """--model, --batch-size, --option; a None default lets a command tell whether the
    user named a model (it then falls back to DEFAULT_MODEL itself); ``option_flags``
    leaves -o to a command whose -o is its output. ``per_device`` (what the devices
    are, for its help) offers --batch-per-device instead of --batch-size."""
    p.add_argument("--model", "-m", default=default,
                   help=f"library model name or a model .py file (default {DEFAULT_MODEL})")
    batch = p.add_mutually_exclusive_group() if per_device else p
    batch.add_argument("--batch-size", "-b", type=int,
                       help="the global batch size (default: the model's)")
    if per_device:
        batch.add_argument("--batch-per-device", type=_batch_per_device, metavar="N",
                           help=f"instead of --batch-size, the paper's convention: N samples "
                           f"on each device, a global batch of N x {per_device} (the FlexFlow "
                           "paper trains with 64, AlexNet with 256: see `flextui models`)")
    p.add_argument(*option_flags, dest="option", action="append", metavar="KEY=VALUE",
                   help="a model option, e.g. -o hidden=512 (repeatable; see `flextui models`)")
    p.add_argument("--opaque", action="store_true",
                   help="a PyTorch model: fold what cannot be partitioned op by op into "
                   "opaque ops that run whole (or split by samples) instead of refusing it")


def _batch_per_device(text: str) -> int:
    """--batch-per-device's value, checked as the app's field is; argparse names the
    flag in its message."""
    from flextui.errors import FieldError
    from flextui.session.choices import parse_batch_per_device
    try:
        return parse_batch_per_device(text)
    except FieldError as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def cluster_arg(p: argparse.ArgumentParser, default: str | None = DEFAULT_CLUSTER) -> None:
    p.add_argument("--cluster", "-c", default=default,
                   help="library cluster name, a .toml file, or 'local' "
                        f"(default {DEFAULT_CLUSTER})")


class StopSignal:
    """The signal that stopped a command's work, if one did (see :func:`stop_on_signals`)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def exit_status(self) -> int:
        """The shell's convention for a command ended by a signal: 128 + its number
        (130 for Ctrl-C, 143 for SIGTERM); 0 when no signal stopped the work."""
        return 128 + self.signum if self.signum is not None else 0


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event):
    """The first SIGINT, SIGTERM or SIGHUP (a closed terminal or ssh session) sets
    ``stop`` (the work in flight ends cleanly and saves what it has); a second SIGINT
    interrupts. Yields a :class:`StopSignal` whose ``exit_status`` the command returns
    once it has saved and reported its work."""
    caught = StopSignal()

    def handler(signum, frame):
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if caught.signum is None:
            caught.signum = signum
        stop.set()
    previous = {s: signal.signal(s, handler)
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield caught
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def strategy_arg(p: argparse.ArgumentParser, default: str | None = "data-parallel",
                 file_note: str = "") -> None:
    """--strategy: a strategy file, or a built-in strategy by name (``load_strategy``
    reads either)."""
    from flextui.strategy import BUILTIN_STRATEGIES
    names = ", ".join(f"{name} (default)" if name == default else name
                      for name in BUILTIN_STRATEGIES)
    p.add_argument("--strategy", "-s", default=default, metavar="FILE|NAME",
                   help=f"a strategy .json file{file_note}, or {names}")


def names_of(kind: type[StrEnum]) -> list[str]:
    """The values of a closed set of names, as an option's choices: argparse lists its
    choices by their repr, so an error says "choose from 'sgd', 'adamw'" only when they
    are plain strings (its consumers take the string, or the enum made from it)."""
    return [member.value for member in kind]


def memory_arg(p: argparse.ArgumentParser) -> None:
    """--memory: what a strategy over a device's memory costs."""
    from flextui.sim.memory import MemoryPolicy
    p.add_argument("--memory", choices=names_of(MemoryPolicy), default=MemoryPolicy.PENALIZE.value,
                   help="over a device's memory: +1 ms per MB over (default), reject, or ignore")


def optimizer_arg(p: argparse.ArgumentParser) -> None:
    """--optimizer: the update training runs, and the state the simulator counts."""
    from flextui.cost.optimizers import OptimizerKind
    p.add_argument("--optimizer", choices=names_of(OptimizerKind),
                   default=OptimizerKind.SGD.value,
                   help="the update: torch.optim.SGD with momentum (one state tensor per "
                   "parameter) or AdamW (two), counted in each device's memory (default sgd)")


def precision_arg(p: argparse.ArgumentParser, what: str) -> None:
    """--precision fp32|bf16: what the strategies ``what`` train in."""
    from flextui.strategy.precision import Precision
    p.add_argument("--precision", choices=names_of(Precision), default=Precision.FP32.value,
                   help=f"what {what} train in: fp32, or bf16 mixed precision (ops compute, "
                   "and activations are kept and sent, in bfloat16; parameters, gradients "
                   "and the optimizer's state stay float32) (default fp32)")


def cost_args(p: argparse.ArgumentParser, default: str = "analytic") -> None:
    """--cost, --profiles, --dtype: which task times a simulation uses (``default``: a
    CostKind's value)."""
    from flextui.cost.choose import CostKind
    p.add_argument("--cost", choices=names_of(CostKind), default=CostKind(default).value,
                   help="task times: the analytic (roofline) model; profiled, measured alone "
                   "by `flextui profile` for the cluster's device kind; recorded, measured in "
                   "a launch with --record-profile; (either analytic where missing); or auto, "
                   "profiled where such profiles exist, else analytic, saying which "
                   f"(default {default})")
    p.add_argument("--profiles", metavar="DIR", help="with --cost profiled, recorded or auto: "
                   "the profile cache directory (default $FLEXTUI_PROFILES, else the user's "
                   "cache directory; recorded ones in its in-run/)")
    dtype_arg(p, "with measured task times: the dtype the profiles were measured in")


def dtype_arg(p: argparse.ArgumentParser, help: str) -> None:
    """--dtype: the dtype a profile is measured in, by its short name."""
    from flextui.cost.signatures import DTYPE_NAMES
    p.add_argument("--dtype", choices=tuple(DTYPE_NAMES), default="fp32", help=help)


def choose_cost(args: argparse.Namespace, graph, cluster, training: bool):
    """The cost model --cost names and what it says about itself (a CostChoice)."""
    from flextui.cost.choose import choose_cost_model
    return choose_cost_model(graph, cluster, args.cost, profiles=args.profiles,
                             dtype=args.dtype, training=training)


def say_notices(notices: list[str]) -> None:
    for notice in notices:
        print(notice, file=sys.stderr)


def load_cost_model(args: argparse.Namespace, graph, cluster, training: bool):
    """The cost model --cost names; what it says about itself goes to stderr."""
    choice = choose_cost(args, graph, cluster, training)
    say_notices(choice.notices)
    return choice.model
