"""The ``flextui`` command line. Each subcommand calls the core and renders its plain
data as rich tables, or as JSON with ``--json`` (the shapes are documented in the
README). Errors the user can cause print one message and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from flextui import __version__
from flextui.errors import FlextuiError

DEFAULT_MODEL = "alexnet"
DEFAULT_CLUSTER = "p100-4x4"


def _options(args: argparse.Namespace) -> dict[str, str]:
    options = {}
    for item in args.option or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FlextuiError(f"--option {item!r}: write KEY=VALUE, e.g. --option hidden=512")
        options[key.strip()] = value.strip()
    if args.batch_size is not None:
        options["batch_size"] = str(args.batch_size)
    return options


def _load_graph(args: argparse.Namespace):
    from flextui.graph.library import load_model
    return load_model(args.model, **_options(args))


def _emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _si(value: float, unit: str = "") -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


# -- models ------------------------------------------------------------------------

def cmd_models(args: argparse.Namespace, console: Console) -> None:
    from flextui.graph.library import model_info, model_names
    infos = [model_info(name) for name in model_names()]
    if args.json:
        _emit_json([{"name": i.name, "description": i.description, "options": i.defaults}
                    for i in infos])
        return
    table = Table(title="Built-in models")
    for col in ("name", "description", "options"):
        table.add_column(col)
    for i in infos:
        table.add_row(i.name, i.description, " ".join(f"{k}={v}" for k, v in i.defaults.items()))
    console.print(table)


# -- clusters ----------------------------------------------------------------------

def cmd_clusters(args: argparse.Namespace, console: Console) -> None:
    from flextui.machine import cluster_names, describe_local, detect_local, load_named_cluster
    if args.detect:
        info, cluster = describe_local(), detect_local()
        if args.json:
            _emit_json({"detected": info, "cluster": cluster.summary()})
            return
        for key, value in info.items():
            console.print(f"[bold]{key}[/]: {value}")
        _print_cluster_table(console, [cluster], "Local machine")
        return
    clusters = [load_named_cluster(name) for name in cluster_names()]
    if args.json:
        _emit_json([{"name": c.name, "description": c.description, **c.summary()} for c in clusters])
        return
    _print_cluster_table(console, clusters, "Built-in clusters")


def _print_cluster_table(console: Console, clusters, title: str) -> None:
    table = Table(title=title)
    for col in ("name", "devices", "nodes", "device kinds", "links"):
        table.add_column(col)
    for c in clusters:
        s = c.summary()
        kinds = ", ".join(f"{n}× {k}" for k, n in s["device_kinds"].items())
        links = ", ".join(f"{k} {v['bandwidth'] / 1e9:.0f} GB/s" for k, v in s["links"].items())
        table.add_row(c.name, str(s["devices"]), str(s["nodes"]), kinds, links or "-")
    console.print(table)


# -- show --------------------------------------------------------------------------

def cmd_show(args: argparse.Namespace, console: Console) -> None:
    graph = _load_graph(args)
    if args.strategy is None:
        if args.export:
            raise FlextuiError("--export writes a strategy: give --strategy too")
        _show_graph(graph, args, console)
    else:
        _show_strategy(graph, args, console)


def _show_graph(graph, args: argparse.Namespace, console: Console) -> None:
    from flextui.graph.summary import graph_summary, op_rows
    summary, rows = graph_summary(graph), op_rows(graph)
    if args.json:
        _emit_json({"summary": summary, "ops": rows})
        return
    console.print(f"[bold]{summary['model']}[/] ({summary['family'] or 'custom'}): "
                  f"{summary['ops']} ops, {summary['parameters']:,} parameters "
                  f"({summary['parameter_bytes'] / 2**20:.1f} MiB), batch {summary['batch_size']}, "
                  f"{_si(summary['forward_flops'], 'FLOP')} forward / "
                  f"{_si(summary['backward_flops'], 'FLOP')} backward per iteration")
    table = Table(caption="dims: S sample, A attribute, P parameter, - not parallel")
    table.add_column("op", overflow="fold")
    for col in ("type", "dims", "params", "fwd FLOPs"):
        table.add_column(col, justify="right" if col in ("params", "fwd FLOPs") else "left")
    for row in rows[: args.limit or None]:
        dims = " ".join(f"{_KIND_MARK[d['kind']]}{d['size']}" for d in row["dims"])
        params = f"{row['parameters']:,}" + (" (shared)" if row["shared"] else "")
        table.add_row(row["name"], row["type"], dims, params, _si(row["forward_flops"]))
    console.print(table)
    if args.limit and len(rows) > args.limit:
        console.print(f"... {len(rows) - args.limit} more ops (--limit 0 shows all)")


_KIND_MARK = {"sample": "S", "attribute": "A", "parameter": "P", None: "-"}


def _load_strategy(name: str, graph, cluster):
    """A built-in strategy by name, or a strategy file, checked against graph and cluster."""
    from pathlib import Path

    from flextui.strategy import BUILTIN_STRATEGIES, builtin_strategy, load_strategy
    if name in BUILTIN_STRATEGIES or not Path(name).exists():
        strategy = builtin_strategy(name, graph, cluster)
        strategy.check(graph, cluster.num_devices)
        return strategy
    return load_strategy(Path(name), graph, cluster)


def _show_strategy(graph, args: argparse.Namespace, console: Console) -> None:
    from flextui.machine import load_named_cluster
    from flextui.strategy import save_strategy
    from flextui.strategy.summary import strategy_rows, strategy_summary
    cluster = load_named_cluster(args.cluster)
    strategy = _load_strategy(args.strategy, graph, cluster)
    if args.export:
        save_strategy(args.export, strategy, graph, cluster)
    summary, rows = strategy_summary(strategy, graph), strategy_rows(strategy, graph)
    if args.json:
        _emit_json({"summary": {**summary, "model": graph.meta.get("model", graph.name),
                                "cluster": cluster.name, "valid": True}, "ops": rows})
        return
    kinds = ", ".join(f"{n} {k}" for k, n in summary["parallelism"].items())
    console.print(f"[bold]{strategy.name}[/] for {graph.name} on {cluster.name} "
                  f"({cluster.num_devices} devices): valid; {summary['tasks']} tasks on "
                  f"{len(summary['devices_used'])} devices; ops: {kinds}")
    table = Table()
    for col in ("op", "type", "degrees", "devices"):
        table.add_column(col)
    for row in rows[: args.limit or None]:
        degrees = " ".join(f"{k}={v}" for k, v in row["degrees"].items()) or "1"
        table.add_row(row["op"], row["type"], degrees, _device_list(row["devices"]))
    console.print(table)
    if args.limit and len(rows) > args.limit:
        console.print(f"... {len(rows) - args.limit} more ops (--limit 0 shows all)")
    if args.export:
        console.print(f"wrote {args.export}")


def _device_list(devices: Sequence[int]) -> str:
    if len(devices) > 2 and list(devices) == list(range(devices[0], devices[-1] + 1)):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


# -- simulate ----------------------------------------------------------------------

def cmd_simulate(args: argparse.Namespace, console: Console) -> None:
    from flextui.cost import AnalyticCostModel
    from flextui.machine import load_named_cluster
    from flextui.sim import Simulator
    from flextui.sim.summary import timeline_summary
    from flextui.sim.trace import write_trace
    graph, cluster = _load_graph(args), load_named_cluster(args.cluster)
    strategy = _load_strategy(args.strategy, graph, cluster)
    simulator = Simulator(graph, cluster, AnalyticCostModel(), training=not args.inference,
                          memory=args.memory)
    timeline = simulator.simulate(strategy)
    if args.trace:
        write_trace(args.trace, timeline)
    summary = {"model": graph.meta.get("model", graph.name), "cluster": cluster.name,
               "strategy": strategy.name, "training": not args.inference,
               **timeline_summary(timeline, graph, top=args.top)}
    if args.json:
        _emit_json(summary)
        return
    rate = summary["throughput_samples_per_s"]
    console.print(f"[bold]{summary['strategy']}[/] for {summary['model']} on {cluster.name}: "
                  f"{summary['iteration_s'] * 1e3:.3f} ms per "
                  f"{'training' if summary['training'] else 'inference'} iteration, "
                  f"{rate:,.0f} samples/s, {summary['communication_bytes'] / 2**20:,.1f} MiB moved "
                  f"over links, {summary['tasks']:,} tasks")
    if summary["overflows"]:
        over = ", ".join(f"{k} by {v / 2**20:,.0f} MiB" for k, v in summary["overflows"].items())
        console.print(f"[red]over memory[/]: {over} (+{summary['memory_penalty_s'] * 1e3:.1f} ms "
                      f"penalty; --memory reject rejects such strategies)")
    table = Table(title="devices")
    for col in ("device", "busy", "sent", "received", "memory"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for d in summary["devices"]:
        table.add_row(d["name"], f"{d['utilization']:.0%}", f"{d['bytes_sent'] / 2**20:,.1f} MiB",
                      f"{d['bytes_received'] / 2**20:,.1f} MiB",
                      f"{d['memory_bytes'] / 2**30:,.2f} / {d['capacity_bytes'] / 2**30:,.0f} GiB")
    console.print(table)
    table = Table(title="top ops by compute time (all tasks, forward + backward)")
    table.add_column("op")
    table.add_column("time", justify="right")
    for row in summary["top_ops"]:
        table.add_row(row["op"], f"{row['compute_s'] * 1e3:.3f} ms")
    console.print(table)
    if args.trace:
        console.print(f"wrote {args.trace} (open it in Perfetto or chrome://tracing)")


# -- parser ------------------------------------------------------------------------

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
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_clusters)

    p = sub.add_parser("show", help="show a model's ops and parallel dims, or validate a strategy",
                       description="Without --strategy: the model's ops, output shapes, parallel "
                       "dims (S/A/P) and FLOPs. With --strategy: validate it against the model "
                       "and cluster and print each op's degrees and devices.")
    _model_args(p)
    p.add_argument("--strategy", "-s", metavar="FILE|NAME",
                   help="a strategy .json file, or data-parallel, model-parallel, expert, random")
    p.add_argument("--cluster", "-c", default=DEFAULT_CLUSTER,
                   help=f"library cluster name, a .toml file, or 'local' (default {DEFAULT_CLUSTER})")
    p.add_argument("--export", metavar="FILE", help="write the strategy to FILE as JSON")
    p.add_argument("--limit", type=int, default=40, help="rows to print (0: all; default 40)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("simulate", help="simulate one iteration of a strategy",
                       description="Simulate one training (or inference) iteration of a model "
                       "under a strategy on a cluster, with the analytic cost model: iteration "
                       "time, throughput, per-device utilisation and memory, communication, "
                       "and the ops that take the longest.")
    _model_args(p)
    p.add_argument("--strategy", "-s", default="data-parallel", metavar="FILE|NAME",
                   help="a strategy .json file, or data-parallel (default), model-parallel, "
                   "expert, random")
    p.add_argument("--cluster", "-c", default=DEFAULT_CLUSTER,
                   help=f"library cluster name, a .toml file, or 'local' (default {DEFAULT_CLUSTER})")
    p.add_argument("--inference", action="store_true", help="forward pass only")
    p.add_argument("--memory", choices=("penalize", "reject", "ignore"), default="penalize",
                   help="over a device's memory: +1 ms per MB over (default), reject, or ignore")
    p.add_argument("--trace", metavar="FILE", help="write the timeline as Chrome trace JSON")
    p.add_argument("--top", type=int, default=10, help="how many top ops to list")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_simulate)
    return parser


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default=DEFAULT_MODEL,
                   help=f"library model name or a model .py file (default {DEFAULT_MODEL})")
    p.add_argument("--batch-size", "-b", type=int, help="batch size (default: the model's)")
    p.add_argument("--option", "-o", action="append", metavar="KEY=VALUE",
                   help="a model option, e.g. -o hidden=512 (repeatable; see `flextui models`)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        handler(args, Console())
    except FlextuiError as exc:
        print(f"flextui: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0
