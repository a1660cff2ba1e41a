"""``flextui models``, ``clusters`` and ``show``: what the libraries hold, and checking
a strategy against a model and cluster."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flextui.cli.common import (
    cluster_arg,
    emit_json,
    load_graph,
    load_strategy,
    model_args,
    si,
    strategy_arg,
)
from flextui.errors import FlextuiError


def models_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_models)


def clusters_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--detect", action="store_true", help="describe the local machine (GPUs or CPU)")
    p.add_argument("--cpu-ranks", type=int, metavar="N",
                   help="with --detect: describe N CPU processes of this machine (the cluster "
                   "local-cpu-N a CPU launch runs on) and the measured figures --cost profiled "
                   "would use for it")
    p.add_argument("--profiles", metavar="DIR", help="with --cpu-ranks: the profile directory "
                   "(default $FLEXTUI_PROFILES, else the user's cache directory)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_clusters)


def show_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Without --strategy: the model's ops, output shapes, parallel dims (S/A/P) "
                     "and FLOPs. With --strategy: validate it against the model and cluster and "
                     "print each op's degrees and devices.")
    model_args(p, per_device="the devices of --cluster (the cluster the strategy is "
               "checked against; without --strategy too)")
    strategy_arg(p, default=None)
    cluster_arg(p)
    p.add_argument("--export", metavar="FILE", help="write the strategy to FILE as JSON")
    p.add_argument("--limit", type=int, default=40, help="rows to print (0: all; default 40)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_show)


def cmd_models(args: argparse.Namespace, console: Console) -> None:
    from flextui.graph.hf_models import FAMILIES, HF_PREFIX
    from flextui.graph.library import model_info, model_names
    infos = [model_info(name) for name in model_names()]
    hf = [model_info(HF_PREFIX + name) for name in FAMILIES]
    if args.json:
        emit_json([{"name": i.name, "description": i.description, "options": i.defaults,
                    "ranges": i.ranges, "paper_batch_per_device": i.paper_batch_per_device}
                   for i in infos + hf])
        return
    for title, group, caption in (
            ("Built-in models", infos, PAPER_BATCH_NOTE),
            ("Hugging Face models (pip install transformers; random weights, "
             "or hf:CONFIG.json)", hf, None)):
        table = Table(title=title, caption=caption)
        for col in ("name", "description", "options"):
            table.add_column(col)
        for i in group:
            options = " ".join(f"{k}={v}" for k, v in i.defaults.items())
            if i.paper_batch_per_device is not None:
                options += f"; paper: {i.paper_batch_per_device} per device"
            table.add_row(i.name, i.description, options)
        console.print(table)


#: what a model's "paper: N per device" says
PAPER_BATCH_NOTE = ("batch_size is the global batch, over all devices. \"paper: N per "
                    "device\" is the FlexFlow paper's batch on each GPU; run its setting with "
                    "--batch-per-device N (-m nmt -c k80-16x4 --batch-per-device 64: a "
                    "batch of 64 x 64 GPUs, 4,096)")


def cmd_clusters(args: argparse.Namespace, console: Console) -> None:
    from flextui.machine import cluster_names, describe_local, detect_local, load_named_cluster
    if args.cpu_ranks is not None or args.profiles is not None:
        if not args.detect or args.cpu_ranks is None:
            raise FlextuiError("--cpu-ranks N goes with --detect (--profiles with both): "
                               "flextui clusters --detect --cpu-ranks 2")
        _cpu_ranks(args, console)
        return
    if args.detect:
        info, cluster = describe_local(), detect_local()
        if args.json:
            emit_json({"detected": info, "cluster": cluster.summary()})
            return
        for key, value in info.items():
            console.print(f"[bold]{key}[/]: {escape(str(value))}")
        _print_cluster_table(console, [cluster], "Local machine")
        return
    clusters = [load_named_cluster(name) for name in cluster_names()]
    if args.json:
        emit_json([{"name": c.name, "description": c.description, **c.summary()} for c in clusters])
        return
    _print_cluster_table(console, clusters, "Built-in clusters")


def _cpu_ranks(args: argparse.Namespace, console: Console) -> None:
    """``--detect --cpu-ranks N``: the cluster ``local-cpu-N`` and what ``--cost profiled``
    would measure it by."""
    from flextui.cost.choose import measured_figures
    from flextui.machine import load_named_cluster
    from flextui.machine.library import cpu_ranks_name
    cluster = load_named_cluster(cpu_ranks_name(args.cpu_ranks))
    figures = measured_figures(cluster, args.profiles)
    if args.json:
        emit_json({"cluster": cluster.summary(), "measured": figures})
        return
    console.print(f"[bold]{escape(cluster.name)}[/]: {escape(cluster.description)}",
                  highlight=False)
    _print_cluster_table(console, [cluster], "CPU ranks of this machine")
    for p in figures["profiles"]:
        console.print(f"task times: {p['tasks']:,} tasks measured on {escape(p['device'])} "
                      f"({escape(p['file'])})", highlight=False)
    if not figures["profiles"]:
        console.print("task times: estimated; no CPU profiles measured with a rank's threads "
                      "yet: flextui profile --device cpu -m MODEL --max-devices "
                      f"{cluster.num_devices}", highlight=False)
    for c in figures["calibrations"]:
        console.print(f"{escape(c['link_kind'])}: calibrated ({escape(c['backend'])}, "
                      f"{c['world_size']} ranks): "
                      f"latency {c['latency_s'] * 1e6:,.1f} us, bandwidth "
                      f"{c['bandwidth'] / 1e9:,.2f} GB/s (fit)", highlight=False)
    if cluster.links and not figures["calibrations"]:
        console.print("loopback: estimated; calibrate it: flextui profile --comm --device cpu",
                      highlight=False)
    if figures["profiles"] or figures["calibrations"]:
        profiles = f"--profiles {args.profiles} " if args.profiles else ""
        console.print(escape(f"use them: flextui search -c {cluster.name} --cost profiled "
                             f"{profiles}..."), highlight=False)


def _print_cluster_table(console: Console, clusters, title: str) -> None:
    table = Table(title=title)
    for col in ("name", "devices", "nodes", "device kinds", "links"):
        table.add_column(col)
    for c in clusters:
        s = c.summary()
        kinds = ", ".join(f"{n}× {k}" for k, n in s["device_kinds"].items())
        links = ", ".join(f"{k} {v['bandwidth'] / 1e9:.0f} GB/s" for k, v in s["links"].items())
        table.add_row(escape(c.name), str(s["devices"]), str(s["nodes"]), escape(kinds),
                      escape(links) or "-")
    console.print(table)


def cmd_show(args: argparse.Namespace, console: Console) -> None:
    from flextui.machine import load_named_cluster
    if args.strategy is None and args.export:
        raise FlextuiError("--export writes a strategy: give --strategy too")
    cluster = load_named_cluster(args.cluster) \
        if args.strategy is not None or args.batch_per_device is not None else None
    graph = load_graph(args, cluster)
    if cluster is None or args.strategy is None:
        _show_graph(graph, args, console, cluster)
    else:
        _show_strategy(graph, cluster, args, console)


def _show_graph(graph, args: argparse.Namespace, console: Console, cluster=None) -> None:
    """The model's ops; ``cluster``, when given, is the one --batch-per-device counted."""
    from flextui.graph.summary import graph_summary, op_rows
    summary, rows = graph_summary(graph), op_rows(graph)
    if args.json:
        emit_json({"summary": summary, "ops": rows})
        return
    family = summary["family"] or "custom"
    batch = f"{summary['batch_size']}" if cluster is None else \
        (f"{summary['batch_size']} ({args.batch_per_device} per device × the "
         f"{cluster.num_devices} devices of {escape(cluster.name)})")
    console.print(f"[bold]{escape(summary['model'])}[/] ({escape(family)}): "
                  f"{summary['ops']} ops, {summary['parameters']:,} parameters "
                  f"({summary['parameter_bytes'] / 2**20:.1f} MiB), batch {batch}, "
                  f"{si(summary['forward_flops'], 'FLOP')} forward / "
                  f"{si(summary['backward_flops'], 'FLOP')} backward per iteration")
    table = Table(caption="dims: S sample, A attribute, P parameter, - not parallel")
    table.add_column("op", overflow="fold")
    for col in ("type", "dims", "params", "fwd FLOPs"):
        table.add_column(col, justify="right" if col in ("params", "fwd FLOPs") else "left")
    for row in rows[: args.limit or None]:
        dims = " ".join(f"{_KIND_MARK[d['kind']]}{d['size']}" for d in row["dims"])
        params = f"{row['parameters']:,}" + (" (shared)" if row["shared"] else "")
        table.add_row(escape(row["name"]), row["type"], dims, params, si(row["forward_flops"]))
    console.print(table)
    if args.limit and len(rows) > args.limit:
        console.print(f"... {len(rows) - args.limit} more ops (--limit 0 shows all)")


_KIND_MARK = {"sample": "S", "attribute": "A", "parameter": "P", None: "-"}


def _show_strategy(graph, cluster, args: argparse.Namespace, console: Console) -> None:
    from flextui.strategy import save_strategy
    from flextui.strategy.summary import (
        device_list,
        sharded_text,
        split_text,
        strategy_rows,
        strategy_summary,
    )
    strategy = load_strategy(args.strategy, graph, cluster, same_graph=True)
    if args.export:
        save_strategy(args.export, strategy, graph, cluster)
    summary, rows = strategy_summary(strategy, graph), strategy_rows(strategy, graph)
    if args.json:
        emit_json({"summary": {**summary, "model": graph.meta.get("model", graph.name),
                                "cluster": cluster.name, "valid": True}, "ops": rows})
        return
    kinds = ", ".join(f"{n} {k}" for k, n in summary["parallelism"].items())
    if summary["recomputed"]:
        kinds += f"; {summary['recomputed']} recomputed"
    if summary["sharded"]:
        kinds += f"; {sharded_text(summary['sharded'])}"
    if summary["precision"] != "fp32":
        kinds += f"; in {summary['precision']}"
    if strategy.pipeline.on:
        kinds += f"; {strategy.pipeline.describe()}"
    console.print(f"[bold]{escape(strategy.name)}[/] for {escape(graph.name)} on "
                  f"{escape(cluster.name)} "
                  f"({cluster.num_devices} devices): valid; {summary['tasks']} tasks on "
                  f"{len(summary['devices_used'])} devices; ops: {kinds}")
    table = Table()
    for col in ("op", "type", "degrees", "devices"):
        table.add_column(col)
    for row in rows[: args.limit or None]:
        table.add_row(escape(row["op"]), row["type"], split_text(row), device_list(row["devices"]))
    console.print(table)
    if args.limit and len(rows) > args.limit:
        console.print(f"... {len(rows) - args.limit} more ops (--limit 0 shows all)")
    if args.export:
        console.print(f"wrote {escape(args.export)}")
