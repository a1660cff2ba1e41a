"""``flextui export --format torch STRATEGY -o plan.py``: a strategy as a Python module
for the user's own training loop (``parallelize(module, device_mesh)``), or, when a
DeviceMesh cannot express it, one message naming the op and why (exit 2)."""

from __future__ import annotations

import argparse
import os
import sys
from enum import StrEnum
from pathlib import Path

from rich.console import Console

from flextui.cli.common import load_graph, load_strategy, model_args, names_of
from flextui.errors import FlextuiError


class ExportFormat(StrEnum):
    """What a strategy can be exported as."""

    TORCH = "torch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Write a strategy as a small Python module that imports only torch: "
                     "parallelize(module, device_mesh) splits the model's layers with "
                     "torch.distributed.tensor.parallel (ColwiseParallel, RowwiseParallel, "
                     "SequenceParallel) and "
                     "replicates it over the data-parallel dim, for your own training loop. A "
                     "strategy a DeviceMesh cannot express is refused, naming the op and why "
                     "(docs/export.md).")
    p.add_argument("strategy", metavar="STRATEGY",
                   help="a strategy .json file made for --model (or a built-in strategy with "
                   "--cluster)")
    p.add_argument("--format", choices=names_of(ExportFormat), default=ExportFormat.TORCH.value,
                   help="what to write (default torch: a module of torch.distributed calls)")
    p.add_argument("--output", "-o", dest="out", metavar="FILE.py",
                   help="where to write it (default: stdout)")
    model_args(p, default=None, option_flags=("--option",))
    p.add_argument("--cluster", "-c",
                   help="the devices, for a built-in strategy (default: as many as the "
                   "strategy file was made for)")
    p.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace, console: Console) -> None:
    from flextui.runtime.export_plan import mesh_plan
    from flextui.runtime.export_torch import torch_module_text
    from flextui.runtime.export_types import NotExpressible

    if args.model is None:
        raise FlextuiError("give --model, the model file the strategy was made for: the plan "
                           "names its layers (e.g. --model model.py)")
    graph = load_graph(args)
    cluster = _cluster(args)
    strategy = load_strategy(args.strategy, graph, cluster, same_graph=True)
    try:
        plan = mesh_plan(graph, strategy, cluster.num_devices)
    except NotExpressible as refused:
        raise FlextuiError(f"cannot export {args.strategy} as a DeviceMesh plan: "
                           f"{refused}") from None
    text = torch_module_text(plan)
    if args.out is None:
        sys.stdout.write(text)
        return
    _write(Path(args.out), text)
    split = f"{len(plan.layers)} Linear layers split over tp" if plan.layers else \
        "no layer split"
    follows = f"; {len(plan.followers)} ops without weights run where their inputs are " \
        "(listed in it)" if plan.followers else ""
    print(f"wrote {args.out}: a {plan.data} x {plan.tensor} (dp x tp) mesh, {split}{follows}",
          file=sys.stderr)


def _cluster(args: argparse.Namespace):
    """--cluster, else as many CPU ranks as the strategy file was made for (the plan
    depends on the device count only)."""
    from flextui.limits import FILE_BYTES, read_file, read_json
    from flextui.machine import load_named_cluster
    from flextui.machine.library import cpu_ranks_name

    if args.cluster:
        return load_named_cluster(args.cluster)
    path = Path(args.strategy)
    if not path.is_file():
        raise FlextuiError(f"strategy file {path} does not exist" if path.suffix else
                           f"{args.strategy}: give --cluster, the devices a built-in strategy "
                           "is for, or a strategy .json file")
    try:
        devices = read_json(read_file(path, FILE_BYTES).decode(), str(path)).get("devices")
    except (OSError, ValueError, AttributeError, FlextuiError):
        devices = None  # loading the strategy says what is wrong with the file
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise FlextuiError(f"{args.strategy} does not say how many devices it is for (its "
                           "\"devices\"): give --cluster")
    return load_named_cluster(cpu_ranks_name(devices))


def _write(path: Path, text: str) -> None:
    """Atomically (temp file + rename): a failed write leaves what was there."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise FlextuiError(f"cannot write {path}: {exc.strerror}") from None
