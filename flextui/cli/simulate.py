"""``flextui simulate``: one simulated iteration of a strategy."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flextui.cli.common import (
    cluster_arg,
    cost_args,
    emit_json,
    load_cost_model,
    load_graph,
    load_strategy,
    memory_arg,
    model_args,
    optimizer_arg,
    strategy_arg,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Simulate one training (or inference) iteration of a model under a "
                     "strategy on a cluster (analytic or profiled task times): iteration time, "
                     "throughput, per-device utilisation and memory, communication, and the ops "
                     "that take the longest.")
    model_args(p, per_device="the cluster's devices")
    strategy_arg(p)
    cluster_arg(p)
    p.add_argument("--inference", action="store_true", help="forward pass only")
    memory_arg(p)
    optimizer_arg(p)
    cost_args(p)
    p.add_argument("--trace", metavar="FILE", help="write the timeline as Chrome trace JSON")
    p.add_argument("--top", type=int, default=10, help="how many top ops to list")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_simulate)


def cmd_simulate(args: argparse.Namespace, console: Console) -> None:
    from flextui.machine import load_named_cluster
    from flextui.sim import Simulator
    from flextui.sim.summary import timeline_summary
    from flextui.sim.trace import write_trace
    cluster = load_named_cluster(args.cluster)
    graph = load_graph(args, cluster)
    strategy = load_strategy(args.strategy, graph, cluster)
    cost_model = load_cost_model(args, graph, cluster, training=not args.inference)
    simulator = Simulator(graph, cluster, cost_model, training=not args.inference,
                          memory=args.memory, optimizer=args.optimizer)
    timeline = simulator.simulate(strategy)
    if args.trace:
        write_trace(args.trace, timeline)
    summary = {"model": graph.meta.get("model", graph.name), "cluster": cluster.name,
               "strategy": strategy.name, "precision": strategy.precision.value,
               "microbatches": strategy.pipeline.microbatches,
               "schedule": strategy.pipeline.schedule.value,
               "training": not args.inference,
               "batch_size": graph.batch_size,
               **timeline_summary(timeline, graph, top=args.top)}
    if args.json:
        emit_json(summary)
        return
    rate = summary["throughput_samples_per_s"]
    console.print(f"[bold]{escape(summary['strategy'])}[/] for {escape(summary['model'])} on "
                  f"{escape(cluster.name)}: "
                  f"{summary['iteration_s'] * 1e3:.3f} ms per "
                  f"{'training' if summary['training'] else 'inference'} iteration"
                  f"{' in ' + summary['precision'] if summary['precision'] != 'fp32' else ''}"
                  f"{', ' + strategy.pipeline.describe() if strategy.pipeline.on else ''}, "
                  f"{rate:,.0f} samples/s, {summary['communication_bytes'] / 2**20:,.1f} MiB moved "
                  f"over links, {summary['tasks']:,} tasks")
    if summary["overflows"]:
        over = escape(", ".join(f"{k} by {v / 2**20:,.0f} MiB"
                                for k, v in summary["overflows"].items()))
        console.print(f"[red]over memory[/]: {over} (+{summary['memory_penalty_s'] * 1e3:.1f} ms "
                      f"penalty; --memory reject rejects such strategies)")
    table = Table(title="devices")
    for col in ("device", "busy", "sent", "received", "memory"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for d in summary["devices"]:
        table.add_row(escape(d["name"]), f"{d['utilization']:.0%}",
                      f"{d['bytes_sent'] / 2**20:,.1f} MiB",
                      f"{d['bytes_received'] / 2**20:,.1f} MiB",
                      f"{d['memory_bytes'] / 2**30:,.2f} / {d['capacity_bytes'] / 2**30:,.0f} GiB")
    console.print(table)
    table = Table(title="top ops by compute time (all tasks, forward + backward)")
    table.add_column("op")
    table.add_column("time", justify="right")
    for row in summary["top_ops"]:
        table.add_row(escape(row["op"]), f"{row['compute_s'] * 1e3:.3f} ms")
    console.print(table)
    if args.trace:
        console.print(f"wrote {escape(args.trace)} (open it in Perfetto or chrome://tracing)")
