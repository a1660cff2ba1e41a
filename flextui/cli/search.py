"""``flextui search``: run the MCMC search, log it, export the best strategy.

Ctrl-C (SIGINT) or SIGTERM ends the search cleanly: the chains stop after their
current step, the log gets its final record, and the best strategy so far is exported;
the exit status is then 130 (143 for SIGTERM), as for any command a signal ended.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from flextui.cli.common import (
    DEFAULT_CLUSTER,
    DEFAULT_MODEL,
    cluster_arg,
    cost_args,
    emit_json,
    load_cost_model,
    load_graph,
    load_strategy,
    memory_arg,
    model_args,
    names_of,
    optimizer_arg,
    precision_arg,
    stop_on_signals,
)
from flextui.errors import FlextuiError
from flextui.search.events import StepEvent
from flextui.search.files import default_export_path, default_log_path
from flextui.search.options import BETA_SCALE, DEFAULT_BUDGET
from flextui.strategy.pipeline import Schedule
from flextui.strategy.precision import Precision
from flextui.strategy.summary import sharded_text

PROGRESS_S = 1.0  # how often the plain (piped) progress prints a line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Metropolis-Hastings search over the SOAP space, guided by "
                     "the delta simulator (FlexFlow section 6). Logs every step to a "
                     ".ffsearch file (replay it with `flextui replay`), exports the best "
                     "strategy as JSON. Ctrl-C stops cleanly and keeps both.")
    model_args(p, default=None, per_device="the cluster's devices")
    cluster_arg(p, default=None)
    p.add_argument("--budget", default=None,
                   help="iterations per chain (5000) or a time (30s, 2m); default 30s")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--workers", "-j", type=int, default=1,
                   help="independent chains, one worker process each (default 1)")
    p.add_argument("--init", default="auto", metavar="NAME|FILE",
                   help="start from auto (default: the faster of data-parallel and expert), "
                   "data-parallel, expert, model-parallel, random, or a strategy .json file")
    p.add_argument("--beta", type=float, help="inverse temperature per ms (default: "
                   f"{BETA_SCALE} / the initial strategy's makespan in ms, see docs/search.md)")
    p.add_argument("--restart-every", type=int, metavar="N",
                   help="every N iterations, go back to the chain's best strategy")
    p.add_argument("--no-early-stop", action="store_true",
                   help="run the whole budget even when the best stops improving")
    p.add_argument("--no-early-reject", action="store_true",
                   help="simulate every proposal to its end, even one already sure to be "
                   "rejected: slower, but every proposal can join the time/memory frontier")
    p.add_argument("--no-recompute", action="store_true",
                   help="never recompute an op (no recomputation moves): splits only, as "
                   "FlexFlow's SOAP space")
    p.add_argument("--no-shard", action="store_true",
                   help="never shard a parameter's training state (no ZeRO stage moves)")
    p.add_argument("--no-pipeline", action="store_true",
                   help="never cut the batch into micro-batches (no pipeline moves)")
    p.add_argument("--microbatches", type=int, default=1, metavar="M",
                   help="start every chain in M micro-batches (sample splits lowered where a "
                   "micro-batch does not allow them; pipeline moves may change it) (default 1)")
    p.add_argument("--schedule", choices=names_of(Schedule), default=Schedule.GPIPE.value,
                   help="the schedule the chains start in: gpipe (every forward pass before "
                   "any backward one) or 1f1b (each stage holds at most the micro-batches "
                   "of the stages after it) (default gpipe)")
    p.add_argument("--memory-budget", metavar="SIZE",
                   help="per-device memory budget (12GiB, 16GB): the search penalises more, "
                   "and the fastest strategy within it is exported")
    memory_arg(p)
    optimizer_arg(p)
    precision_arg(p, "the strategies searched")
    p.add_argument("--inference", action="store_true", help="optimise the forward pass only")
    cost_args(p)
    p.add_argument("--out", metavar="FILE.ffsearch",
                   help="the search log (default: <model>-<cluster>-<time>.ffsearch here)")
    p.add_argument("--no-log", action="store_true", help="do not write a search log")
    p.add_argument("--resume", metavar="FILE.ffsearch",
                   help="continue the search logged in FILE (its model, cluster and options)")
    p.add_argument("--export-strategy", metavar="FILE.json",
                   help="where to write the best strategy (default: next to the log)")
    p.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    p.set_defaults(handler=cmd_search)


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    from flextui.search.log import read_search_log
    from flextui.search.runner import SearchLogFailed
    from flextui.sim.taskstore import backend
    if backend() == "Python":
        print("flextui: note: the simulator's C core is not in use (flextui was installed "
              "without a C compiler, or FLEXTUI_PURE_PYTHON is set), so the search runs "
              "several times slower; install gcc and reinstall flextui", file=sys.stderr)
    resume = read_search_log(args.resume) if args.resume else None
    notice = None if resume else _defaults_notice(args)
    graph, cluster, cost_model, options, initial = _inputs(args, resume)
    log_path = None if (args.no_log or resume) else _log_path(args, graph, cluster)
    export = Path(args.export_strategy) if args.export_strategy else \
        default_export_path(resume.path if resume else log_path, graph, cluster)
    stop = threading.Event()
    try:
        with stop_on_signals(stop) as caught:
            result = _run(graph, cluster, cost_model, options, initial, log_path, resume, args,
                          console, stop, notice)
    except SearchLogFailed as failed:  # a log was being written: a new one or the resumed one
        raise _log_failure(failed, graph, cluster, options, export,
                           log_path or (resume.path if resume else None)) from None
    _report(result, graph, cluster, cost_model, options, log_path or (resume and resume.path),
            export, args, console)
    return caught.exit_status


def _inputs(args, resume):
    """Graph, cluster, cost model, options and initial strategy, from the command line
    or, resuming, from the log (which a --model/--cluster given too must match)."""
    from flextui.cost import cost_model_from_identity
    from flextui.errors import FieldError
    from flextui.machine import load_named_cluster
    from flextui.search.options import INITS, SearchOptions, search_options
    try:
        given = search_options(
            args.budget or DEFAULT_BUDGET, seed=args.seed, workers=args.workers,
            beta=args.beta, memory=args.memory, memory_budget=args.memory_budget,
            init=args.init, restart_every=args.restart_every,
            converge=not args.no_early_stop, training=not args.inference,
            early_reject=not args.no_early_reject, optimizer=args.optimizer,
            precision=args.precision,
            recompute=0.0 if args.no_recompute else SearchOptions.recompute,
            shard=0.0 if args.no_shard else SearchOptions.shard,
            pipeline=0.0 if args.no_pipeline else SearchOptions.pipeline,
            microbatches=args.microbatches, schedule=args.schedule)
    except FieldError as e:
        raise FlextuiError(e.flag_message) from None
    if resume is not None:
        header = resume.header
        if resume.final is not None:
            raise FlextuiError(f"{resume.path}: this search already finished "
                               f"({resume.final.reason}); start a new one with "
                               "--init and the strategy `flextui replay "
                               f"{shlex.quote(str(resume.path))} --export-strategy best.json` "
                               "writes")
        _check_same(args, header)
        options = header.options
        if args.budget:
            options = options.with_changes(iterations=given.iterations,
                                           time_limit=given.time_limit)
        return header.graph, header.cluster, cost_model_from_identity(header.cost_model), \
            options, None
    args.model = args.model or DEFAULT_MODEL
    cluster = load_named_cluster(args.cluster or DEFAULT_CLUSTER)
    graph = load_graph(args, cluster)
    initial = None
    if args.init not in INITS:
        initial = load_strategy(args.init, graph, cluster)
    cost_model = load_cost_model(args, graph, cluster, training=given.training)
    return graph, cluster, cost_model, given, initial


def _defaults_notice(args) -> str | None:
    """A line saying what a new search runs on that the user did not choose, if anything."""
    defaulted = [what for what, given in (("model", args.model), ("cluster", args.cluster),
                                          ("budget", args.budget)) if not given]
    if not defaulted:
        return None
    return (f"flextui: searching {args.model or DEFAULT_MODEL} on "
            f"{args.cluster or DEFAULT_CLUSTER}, budget {args.budget or DEFAULT_BUDGET} "
            f"({', '.join(defaulted)} by default; choose with --model, --cluster, --budget)")


def _check_same(args, header) -> None:
    """A resumed log must be resumed against the model and cluster it was started on.
    With -b, --batch-per-device or -o and no --model, the log's model is rebuilt to
    compare only when it is a built-in one: a log is data, and never makes flextui import
    a model file it names; the message names the flags given."""
    from flextui.graph.library import model_names
    from flextui.machine import load_named_cluster
    if args.model or args.option or args.batch_size or args.batch_per_device:
        logged = header.graph.meta.get("model", header.graph.name)
        if not args.model and logged not in model_names():
            given = "/".join(flag for flag, value in (("-b", args.batch_size),
                                                      ("--batch-per-device",
                                                       args.batch_per_device),
                                                      ("-o", args.option)) if value)
            raise FlextuiError(f"this search's model {logged!r:.80} is not a built-in one; "
                               f"to check {given} against it, name its file with --model (a "
                               "log never makes flextui run a model file), or resume without "
                               f"{given} to use the log's own copy")
        args.model = args.model or logged
        graph = load_graph(args, header.cluster)
        if graph.fingerprint != header.graph.fingerprint:
            raise FlextuiError(f"--model {args.model} is not the model this search ran on "
                               f"({header.graph.name}, fingerprint {header.graph.fingerprint}); "
                               "resume without --model to use the log's own copy")
    if args.cluster:
        cluster = load_named_cluster(args.cluster)
        if cluster.fingerprint != header.cluster.fingerprint:
            raise FlextuiError(f"--cluster {args.cluster} is not the cluster this search ran "
                               f"on ({header.cluster.name}); resume without --cluster to use "
                               "the log's own copy")


def _log_path(args, graph, cluster) -> Path:
    """--out, else a new name here; the writer creates it exclusively (an existing log,
    or one another search is writing, is refused there with what to do)."""
    return Path(args.out) if args.out else default_log_path(graph, cluster)


def _run(graph, cluster, cost_model, options, initial, log_path, resume, args, console, stop,
         notice=None):
    from flextui.search import run_search
    progress = _Progress(console, options, quiet=args.json, notice=notice)
    return run_search(graph, cluster, cost_model, options, initial=initial, log_path=log_path,
                      resume=resume, on_events=progress.update, stop=stop)


class _Progress:
    """A line of progress per second: to a terminal, rewritten in place; piped, appended.
    A ``notice`` goes to stderr with the first steps: once the search runs, so bad input
    still ends in its one line."""

    def __init__(self, console: Console, options, quiet: bool,
                 notice: str | None = None) -> None:
        self.console, self.options, self.quiet, self.notice = console, options, quiet, notice
        self.latest: dict[int, StepEvent] = {}
        self.shown = 0.0
        self.width = 0      # of the longest line shown in place, which a shorter one covers

    def update(self, events) -> None:
        if self.notice:
            print(self.notice, file=sys.stderr)
            self.notice = None
        for e in events:
            self.latest[e.chain] = e
        now = time.monotonic()
        if self.quiet or now - self.shown < PROGRESS_S:
            return
        self.shown = now
        best = min(e.best for e in self.latest.values())
        iterations = sum(e.iteration for e in self.latest.values())
        elapsed = max(e.elapsed for e in self.latest.values())
        line = (f"{elapsed:6.1f}s  {iterations:>8,} steps  best {best * 1e3:.3f} ms  "
                f"{iterations / max(elapsed, 1e-9):,.0f} steps/s")
        if self.console.is_terminal:
            self.width = max(self.width, len(line))
            self.console.print(line.ljust(self.width), end="\r", highlight=False,
                               soft_wrap=True)
        else:
            self.console.print(line, highlight=False, soft_wrap=True)


def _chosen(result, options) -> tuple:
    """The strategy to export (the fastest within --memory-budget, when there is one) and
    a note when none simulated fits it."""
    if options.memory_budget:
        point = result.fastest_within(options.memory_budget)
        if point is None:
            return result.best, ("no strategy simulated fits the memory budget; exported the "
                                 "fastest found")
        return point.strategy, None
    return result.best, None


def _export(result, graph, cluster, options, export):
    """Write the chosen strategy to ``export``; it and the note about it."""
    from flextui.search.files import searched_strategy_name
    from flextui.strategy import Strategy, save_strategy
    chosen, note = _chosen(result, options)
    chosen = Strategy(chosen, name=searched_strategy_name(options.seed))
    save_strategy(export, chosen, graph, cluster)
    return chosen, note


def _log_failure(failed, graph, cluster, options, export, log_path) -> FlextuiError:
    """The log could not be written: export the best so far if the disk lets us; the one
    message that says what was kept where."""
    best = f"The best strategy so far ({failed.result.best_cost * 1e3:.3f} ms)"
    log = shlex.quote(str(log_path))
    try:
        _export(failed.result, graph, cluster, options, export)
    except FlextuiError as exc:
        return FlextuiError(f"{failed}. {best} could not be exported either ({exc}); free "
                            "some space, then export the best the log kept with: flextui "
                            f"replay {log} --export-strategy best.json")
    return FlextuiError(f"{failed}. {best} is exported to {export}; free some space, then "
                        f"continue the search with: flextui search --resume {log}")


def _report(result, graph, cluster, cost_model, options, log_path, export, args, console):
    from flextui.machine.units import format_bytes
    from flextui.search.summary import search_summary, strategy_figures
    chosen, note = _export(result, graph, cluster, options, export)
    summary = search_summary(result, graph, cluster, cost_model, options)
    summary.update(log=str(log_path) if log_path else None, strategy=str(export), note=note,
                   **strategy_figures(chosen, graph, cluster, cost_model, options))
    if args.json:
        emit_json(summary)
        return
    if console.is_terminal:
        console.print()
    console.print(
        f"[bold]{escape(summary['model'])}[/] on {escape(summary['cluster'])}: best "
        f"{summary['best_s'] * 1e3:.3f} ms per iteration after {summary['iterations']:,} "
        f"steps in {summary['elapsed_s']:.1f} s ({summary['reason']}); data parallel "
        f"{summary['data_parallel_s'] * 1e3:.3f} ms "
        f"({summary['speedup_over_data_parallel']:.2f}x), "
        f"expert {summary['expert_s'] * 1e3:.3f} ms; acceptance {summary['acceptance_rate']:.0%}; "
        f"no strategy is faster than {summary['lower_bound_s'] * 1e3:.3f} ms (its compute "
        "spread evenly over the devices)")
    if options.memory_budget:
        budget, used = summary["memory_budget_bytes"], summary["strategy_memory_bytes"]
        console.print(f"memory: the exported strategy ({summary['strategy_s'] * 1e3:.3f} ms) "
                      f"needs {format_bytes(used)} on its fullest device, "
                      f"{'within' if used <= budget else 'over'} the {format_bytes(budget)} "
                      "budget")
    if options.training:
        sharded = summary["sharded_params"]
        console.print(f"choices: the exported strategy recomputes {summary['recomputed_ops']} "
                      f"of {len(graph.ops)} ops"
                      + (f"; {sharded_text(sharded)} of {len(graph.parameters)}"
                         if sharded else "")
                      + (f"; in {options.precision}"
                         if options.precision != Precision.FP32 else "")
                      + (f"; {chosen.pipeline.describe()}" if chosen.pipeline.on else ""))
    if note:
        console.print(f"[yellow]{note}[/]")
    if log_path:
        console.print(escape(f"log: {log_path}  (flextui replay {shlex.quote(str(log_path))} "
                             "--headless)"))
    console.print(escape(f"best strategy: {export}  "
                         f"({_simulate_hint(args, graph, cluster, export)})"))


def _simulate_hint(args, graph, cluster, export) -> str:
    """The command that simulates the exported strategy. A model or cluster read from a
    log is named only when it is a built-in one (a log's text is never offered as a
    command); what the user typed is repeated, quoted (its -b, -o and --opaque too: the
    model they build is the one the strategy is for)."""
    from flextui.graph.library import model_names
    from flextui.machine import cluster_names
    built: list[str] = []
    if args.resume:
        logged = graph.meta.get("model", graph.name)
        model = logged if logged in model_names() else "MODEL.py"
        where = cluster.name if cluster.name in cluster_names() else "CLUSTER.toml"
    else:
        model, where = args.model, args.cluster or DEFAULT_CLUSTER
        built += ["-b", str(args.batch_size)] if args.batch_size else []
        built += ["--batch-per-device", str(args.batch_per_device)] \
            if args.batch_per_device else []
        built += [part for option in args.option or [] for part in ("-o", option)]
    if any(op.type == "opaque" for op in graph.ops):
        built.append("--opaque")
    return " ".join(["flextui simulate -m", shlex.quote(model), *map(shlex.quote, built),
                     "-c", shlex.quote(where), "--strategy", shlex.quote(str(export))])
