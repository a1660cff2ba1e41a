"""``flextui replay``: what a saved search (.ffsearch) did, from the log alone (it
carries its model and cluster, so no library and no GPU are needed)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flextui.cli.common import emit_json
from flextui.errors import FlextuiError
from flextui.graph.dims import DimKind
from flextui.strategy.summary import device_list


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Summarise a search log: best cost over time, acceptance "
                     "rate, speedup over data parallelism and the best strategy; export the "
                     "best strategy (or the one at any step) and its simulated timeline.")
    p.add_argument("log", metavar="FILE.ffsearch")
    p.add_argument("--headless", action="store_true",
                   help="print the summary instead of playing the search back in the app "
                   "(what happens anyway when not at a terminal, or with --json or an export)")
    p.add_argument("--chain", type=int, default=None, help="with --step: which chain")
    p.add_argument("--step", type=int, default=None,
                   help="export the chain's strategy after this many steps instead of the best")
    p.add_argument("--export-strategy", metavar="FILE.json", help="write the strategy as JSON")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the strategy's simulated timeline as Chrome trace JSON")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--model", "-m", metavar="FILE",
                   help="in the app, the model to launch the search's best strategy with "
                   "(l): a PyTorch model's file, package.module:factory or torchvision:NAME; "
                   "a log never names code to run, and the model must build the log's graph")
    p.set_defaults(handler=cmd_replay)


def cmd_replay(args: argparse.Namespace, console: Console) -> int | None:
    from flextui.cli import open_app
    from flextui.cli.common import interactive
    exporting = args.export_strategy or args.trace or args.step is not None
    if not (args.headless or args.json or exporting) and interactive():
        from flextui.search.log import read_search_log
        read_search_log(args.log)   # a bad log is a message here, before the app opens
        return open_app(args, console)
    if args.model is not None:
        raise FlextuiError("--model is for launching the replayed search from the app (l); "
                           "a headless replay runs no model")
    _replay_headless(args, console)
    return None


def _replay_headless(args: argparse.Namespace, console: Console) -> None:
    from flextui.cost import cost_model_from_identity
    from flextui.search.baselines import search_simulator
    from flextui.search.files import searched_strategy_name
    from flextui.search.log import read_search_log
    from flextui.search.summary import log_summary
    from flextui.sim.trace import write_trace
    from flextui.strategy import Strategy, save_strategy
    log = read_search_log(args.log)
    header = log.header
    cost_model = cost_model_from_identity(header.cost_model)
    summary = log_summary(log, cost_model)
    strategy = Strategy(summary.pop("best"), name=searched_strategy_name(header.seed))
    if args.step is not None:
        chain = args.chain or 0
        strategy = log.strategy_at(chain, args.step)
        if args.step > 0:   # step 0 is the chain's initial strategy, named for what it is
            strategy = Strategy(strategy, searched_strategy_name(header.seed, chain, args.step))
    elif args.chain is not None:
        raise FlextuiError("--chain goes with --step")
    if args.export_strategy:
        save_strategy(args.export_strategy, strategy, header.graph, header.cluster)
    if args.trace or args.step is not None:
        options = header.options
        timeline = search_simulator(header.graph, header.cluster, cost_model,
                                    options).simulate(strategy)
        if args.trace:
            write_trace(args.trace, timeline)
        if args.step is not None:
            summary["step"] = {"chain": chain, "iteration": args.step, "cost_s": timeline.cost}
    if args.json:
        emit_json(summary)
        return
    _print(summary, strategy, header, console)
    for flag, what in ((args.export_strategy, "strategy"), (args.trace, "timeline trace")):
        if flag:
            console.print(f"wrote the {what} to {escape(flag)}")


def _print(summary, strategy, header, console: Console) -> None:
    state = f"finished ({summary['reason']})" if summary["finished"] else \
        "not finished" + (" (its last record was cut off)" if summary["truncated"] else "")
    console.print(f"[bold]{escape(summary['log'])}[/]: {escape(summary['model'])} on "
                  f"{escape(summary['cluster'])}, seed {summary['seed']}, flextui "
                  f"{escape(summary['flextui_version'])}, {state}")
    console.print(f"{summary['iterations']:,} steps in {summary['elapsed_s']:.1f} s, "
                  f"acceptance {summary['acceptance_rate']:.0%}; best "
                  f"{summary['best_s'] * 1e3:.3f} ms vs data parallel "
                  f"{summary['data_parallel_s'] * 1e3:.3f} ms "
                  f"({summary['speedup_over_data_parallel']:.2f}x), expert "
                  f"{summary['expert_s'] * 1e3:.3f} ms")
    table = Table(title="best cost over time")
    for col in ("elapsed", "chain", "step", "best"):
        table.add_column(col, justify="right")
    rows = summary["best_over_time"]
    for row in rows[:5] + (rows[-5:] if len(rows) > 10 else rows[5:]):
        table.add_row(f"{row['elapsed_s']:.2f} s", str(row["chain"]), f"{row['iteration']:,}",
                      f"{row['best_s'] * 1e3:.3f} ms")
    console.print(table)
    step = summary.get("step")
    if step is not None:
        console.print(f"strategy after step {step['iteration']:,} of chain {step['chain']}: "
                      f"{step['cost_s'] * 1e3:.3f} ms ({escape(strategy.name)})")
    table = Table(title=f"{'this' if step else 'best'} strategy (ops not split over the sample "
                  "dim only)")
    for col in ("op", "degrees", "devices"):
        table.add_column(col)
    for op in header.graph.ops:
        config = strategy[op.name]
        split = [(d, n) for d, n in zip(op.space, config.degrees) if n > 1]
        if any(d.kind != DimKind.SAMPLE for d, _ in split):
            table.add_row(escape(op.name), " ".join(f"{d.name}={n}" for d, n in split),
                          device_list(config.devices))
    console.print(table if table.row_count else "best strategy: every op is data parallel "
                  "(or unsplit)")
