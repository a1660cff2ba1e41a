"""``flextui launch``: train a strategy for real with torchrun, one rank per device,
and say per device how it ran against what the simulator predicted.

Ctrl-C, SIGTERM or SIGHUP stops the run: every rank ends, the run log gets its final
record, and the exit status is 130 (143 for SIGTERM, 129 for SIGHUP). A failed run (a
rank raised, ran out of memory or was killed) exits with 1 and names the rank and what
it said last; a mistake in what was asked (a strategy for another model or for more
devices) exits with 2 before any process starts.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from flextui.cli import against_dp, record_profile
from flextui.cli.common import (
    choose_cost,
    cost_args,
    emit_json,
    interactive,
    load_graph,
    model_args,
    say_notices,
    stop_on_signals,
    strategy_arg,
)
from flextui.cli.launch_inputs import (
    asked,
    beside_strategy,
    check_graph,
    launch_cluster,
    precision_asked,
    training_args,
)
from flextui.errors import FlextuiError
from flextui.fields import printable
from flextui.runtime.metrics import RankRecord, Steps
from flextui.runtime.stepfigures import RunFigures
from flextui.strategy.precision import Precision

PROGRESS_S = 1.0
EXIT_FAILED = 1
#: how a Python traceback begins
TRACEBACK = "Traceback (most recent call last):"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Train a model under a strategy with torchrun, one rank per device (gloo "
                     "between CPU processes without a GPU, NCCL between GPUs), and print per "
                     "device the measured samples/s, step time, compute and communication share "
                     "and memory, against the simulated iteration and busy times. Every rank "
                     "reports on its stdout; everything is kept in a run log (.ffrun).")
    model_args(p, per_device="the launch's ranks (its cluster's devices)")
    strategy_arg(p, file_note=" (made for this model, batch and options)")
    p.add_argument("--cluster", "-c", default=None,
                   help="the devices the strategy is for: default this machine's GPUs, or "
                   "--nproc-per-node CPU processes (local-cpu-N) without a GPU")
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="CPU processes to launch when there is no GPU (default: what the "
                   "strategy file was made for, else 2)")
    span = p.add_mutually_exclusive_group()
    span.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    span.add_argument("--epochs", type=int, metavar="N",
                      help="instead of --steps: N passes over the model file's dataset() or "
                      "--data, the --warmup steps among them")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and data")
    p.add_argument("--lr", type=float, default=0.01,
                   help="the learning rate (default 0.01), at its peak under a schedule")
    training_args(p)
    p.add_argument("--shuffle", action="store_true",
                   help="with a model file's dataset() or --data: each epoch in its own "
                   "order, torch.randperm(len, generator seeded seed + epoch); default in order")
    p.add_argument("--data-workers", type=int, default=0, metavar="N",
                   help="DataLoader worker processes each rank reads the model file's "
                   "dataset() or --data with (default 0: in the rank)")
    p.add_argument("--data", metavar="FILE.npy",
                   help="token ids for a causal language model (hf:gpt2, hf:llama): one "
                   "array of tokens read as windows of seq_len, or [N, seq_len] rows")
    p.add_argument("--eval-every", type=int, default=0, metavar="N",
                   help="after every N steps, the mean loss over the model file's "
                   "dataset(\"val\") (forward only; default 0: never)")
    p.add_argument("--save", metavar="DIR",
                   help="save a checkpoint into DIR/step-N every --save-every N steps")
    p.add_argument("--save-every", type=int, default=0, metavar="N",
                   help="steps between checkpoints (with --save)")
    p.add_argument("--resume", metavar="DIR",
                   help="go on from the newest checkpoint in DIR (same model, strategy, "
                        "--seed and --precision; --steps more steps)")
    p.add_argument("--backend", choices=("nccl", "gloo"),
                   help="default: nccl with GPUs, gloo without")
    p.add_argument("--port", type=int, help="rendezvous port on localhost, or on the first host "
                   "(default: a free one)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", metavar="H1,H2,...",
                       help="run over these hosts through ssh, host k running node k of the "
                       "cluster (default: this machine)")
    hosts.add_argument("--hostfile", metavar="FILE",
                       help="the hosts, one a line: 'HOST slots=N' (as DeepSpeed reads it)")
    p.add_argument("--ssh", metavar="CMD",
                   help="the ssh command that reaches a host (default: $FLEXTUI_SSH, else "
                   "ssh; always with -o BatchMode=yes)")
    p.add_argument("--remote-python", metavar="PATH",
                   help="the Python with flextui on the hosts (default: this one's path)")
    p.add_argument("--run-log", metavar="FILE.ffrun",
                   help="the run log (default: <model>-<cluster>-<time>.ffrun next to the "
                   "strategy file, or here)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="also write each step (loss, learning rate, samples/s, tokens/s, MFU) "
                   "as a CSV row to DIR/<run log name>.csv as the run goes, and TensorBoard "
                   "scalars under DIR/<run log name>/ when torch.utils.tensorboard imports")
    p.add_argument("--check", action="store_true",
                   help="instead of training: run 3 steps at a small batch in float64 and "
                   "compare every rank's parameters and the loss with one process")
    p.add_argument("--dry-run", action="store_true",
                   help="print the torchrun command and environment; start nothing")
    cost_args(p, default="auto")
    record_profile.add_argument(p)
    against_dp.add_argument(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--headless", action="store_true",
                   help="in a terminal too, print progress and the table instead of opening "
                   "the app's Launch screen")
    p.set_defaults(handler=cmd_launch)


def cmd_launch(args: argparse.Namespace, console: Console) -> int:
    from dataclasses import replace

    from flextui.runtime import job
    from flextui.runtime.checkpointing import asked as checkpoints_asked
    from flextui.runtime.data import check_dataset, data_feed, epochs_steps
    from flextui.runtime.launch import RunStatus
    from flextui.runtime.nodes import PreflightStopped
    from flextui.session.launching import launch_request, launch_strategy

    training, target = asked(args)
    record_profile.check(args)
    against_dp.check(args)
    cluster = launch_cluster(args, training, target.hosts)
    graph = load_graph(args, cluster)
    training = replace(training, data=data_feed(graph, args.shuffle, args.data_workers,
                                                args.eval_every, args.data))
    if args.epochs is not None:
        training = replace(training, steps=epochs_steps(graph, training, args.epochs))
    strategy = precision_asked(args, launch_strategy(args.strategy, graph, cluster))
    if args.record_profile and strategy.precision != Precision.FP32:
        raise FlextuiError(f"--record-profile records the task times of a float32 run, and "
                           f"strategy {strategy.name!r} trains in {strategy.precision}; give "
                           "--precision fp32")
    training = replace(training, checkpoint=checkpoints_asked(
        args.save, args.save_every, args.resume, graph, strategy, cluster.num_devices,
        training.seed, str(training.dtype)))
    backend = job.choose_backend(cluster, args.backend, on_hosts=not target.local)
    training = replace(training, backend=backend)
    cost = choose_cost(args, graph, cluster, training=True)   # said once the checks pass
    cost_model = cost.model
    run_log = Path(args.run_log) if args.run_log else beside_strategy(args.strategy, graph,
                                                                        cluster)
    where = "" if target.local else f" over {', '.join(target.host_names())}"
    stop = threading.Event()
    with stop_on_signals(stop) as caught:  # a stop during preflight ends its ssh sessions
        try:
            request = launch_request(graph, strategy, cluster, cost_model,
                                     f"{graph.name} on {cluster.name}{where}", training=training,
                                     target=target, run_log=run_log, stop=stop)
        except PreflightStopped as stopped:
            print(f"flextui: {stopped}", file=sys.stderr)
    if caught.exit_status:
        return caught.exit_status
    if args.log_dir is not None:
        request = replace(request, prepared=replace(request.prepared,
                                                    step_log=Path(args.log_dir)))
    prepared = request.prepared
    if args.check:
        if args.resume:
            raise FlextuiError("--check trains its referee from the start: launch --check "
                               "without --resume")
        small = check_graph(args, graph, strategy, cluster.num_devices)
        prepared = job.as_check(prepared, small)
    check_dataset(prepared.spec)
    say_notices(cost.notices)
    if args.dry_run:
        return _dry_run(prepared, console, args.json)
    if not (args.headless or args.json or args.check or args.record_profile) \
            and interactive():
        from flextui.tui.app import run_app
        return run_app(launch=request)
    stop = threading.Event()
    progress = _Progress(prepared, console, quiet=args.json)
    said = (f"launching {graph.name} ({strategy.name}) on {cluster.num_devices} ranks "
            f"({cluster.name}, {backend}){where}; run log {prepared.run_log}")
    if args.json:  # stdout holds the JSON alone
        print(said, file=sys.stderr)
    else:
        console.print(said, markup=False, highlight=False)  # names from files: text
    with stop_on_signals(stop) as caught:
        outcome, summary, records = job.execute(prepared, stop, progress.record,
                                                progress.output)
    figures = RunFigures.of(summary, records, prepared.spec, prepared.cluster)
    if args.check:
        return _report_check(outcome, records, console, args.json, graph,
                             prepared.spec.strategy, prepared.spec.training.optimizer,
                             figures) or caught.exit_status
    recorded = record_profile.record(args, graph, outcome, records, console)
    evaluated = _evaluations(records) if args.eval_every else {}
    if not args.json:
        print_summary(summary, console, figures)
        for step, loss in evaluated.items():
            console.print(f"after step {step}: loss {loss:.6g} on dataset('val')",
                          highlight=False)
        # the message quotes a rank's output (gloo's errors hold [path:line]): not
        # markup, and its control characters escaped
        console.print(printable(outcome.message), markup=False, highlight=False)
    compared = (against_dp.compare(args, request, summary, stop, console,
                                   lambda run: _Progress(run, console, quiet=args.json))
                if outcome.status == RunStatus.FINISHED and not caught.exit_status else {})
    if args.json:
        emit_json({"status": str(outcome.status), "message": outcome.message,
                   "failed_rank": outcome.failed_rank, "run_log": str(prepared.run_log),
                   **summary.to_dict(), **figures.to_dict(), **recorded, **compared,
                   **({"evaluations": [{"step": step, "loss": loss}
                                       for step, loss in evaluated.items()]}
                      if args.eval_every else {})})
    if caught.exit_status:
        return caught.exit_status
    return EXIT_FAILED if outcome.status == RunStatus.FAILED else 0


# -- output ------------------------------------------------------------------------------


def _dry_run(prepared, console: Console, as_json: bool) -> int:
    env = None if prepared.nodes is not None else \
        prepared.torchrun(Path("<plan dir>")).environment(launcher_pid=0)
    if as_json:
        emit_json({"commands": [list(command) for command in prepared.commands()],
                   "environment": env, "ranks": prepared.spec.num_ranks,
                   "batch_size": prepared.spec.graph.batch_size,
                   "backend": str(prepared.spec.training.backend),
                   "run_log": str(prepared.run_log)})
        return 0
    for command in prepared.commands():
        if env is not None:
            print(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()), end=" ")
        print(shlex.join(command))
    where = ("the plan travels over each ssh session's stdin to the node program, which "
             "writes it to a temporary directory" if prepared.nodes else
             "the plan file is written to a temporary directory when the run starts")
    console.print(f"({where}; {prepared.spec.num_ranks} ranks, "
                  f"{prepared.spec.training.backend}, FLEXTUI_LAUNCHER_PID is the PID of the "
                  "launcher or node program)", highlight=False)
    return 0


class _Progress:
    """A progress line at most every PROGRESS_S seconds, and the ranks' other output
    (escaped: it is text from other processes). A rank's output from a traceback on (it
    is failing), and torchrun's from its own (its report of the failure), stay in the
    run log: the failure is named once at the end, and a line says where the rest is."""

    def __init__(self, prepared, console: Console, quiet: bool) -> None:
        self.console, self.quiet = console, quiet
        self.run_log = prepared.run_log
        self.failing: set[int] = set()   # ranks (-1: torchrun) whose traceback began
        self.total = prepared.spec.training.warmup + prepared.spec.training.steps
        self.batch = prepared.spec.graph.batch_size
        self.done: dict[int, int] = {}
        self.step_s: dict[int, float] = {}
        self.shown = 0.0

    def record(self, record: RankRecord) -> None:
        if not isinstance(record, Steps):
            return
        self.done[record.rank] = record.last + 1
        self.step_s[record.rank] = record.step_s / record.count
        now = time.monotonic()
        if self.quiet or now - self.shown < PROGRESS_S:
            return
        self.shown = now
        step = max(self.step_s.values())
        print(f"step {min(self.done.values()):,}/{self.total:,}  "
              f"{self.batch / step if step else 0:,.1f} samples/s", file=sys.stderr)

    def output(self, rank: int, line: str) -> None:
        """A line of a rank's output (rank -1: torchrun's), its control characters
        escaped (a rank's output is data, never the terminal's escapes), up to the first
        traceback: from there the lines go to the run log only."""
        if self.quiet or rank in self.failing:
            return
        if TRACEBACK in line:
            said = bool(self.failing)
            self.failing.add(rank)
            if said:
                return
            line = (f"{'torchrun' if rank < 0 else f'rank {rank}'} reports a traceback; "
                    "it and what follows are in the run log: flextui runs show --output "
                    f"{shlex.quote(str(self.run_log))}")
        print(f"[rank {rank}] {printable(line)}" if rank >= 0 else printable(line),
              file=sys.stderr)


def _evaluations(records: list[RankRecord]) -> dict[int, float]:
    """The validation loss after each step evaluated (counted from 1): the ranks'
    shares summed."""
    from flextui.runtime.metrics import Evaluated

    losses: dict[int, float] = {}
    for r in records:
        if isinstance(r, Evaluated):
            losses[r.step + 1] = losses.get(r.step + 1, 0.0) + r.loss
    return dict(sorted(losses.items()))


def print_summary(summary, console: Console, figures: RunFigures) -> None:
    table = Table(title=f"measured over {summary.steps} steps of batch {summary.batch_size} "
                  "(ms; busy: compute per step, against simulated; none: the step's share "
                  "in neither compute nor a wait, which nothing simulates)", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, collapse_padding=True)
    for col in ("device", "samples/s", "step", "cmp/wait", "none", "memory", "GPU", "busy",
                "sim", "error"):
        table.add_column(col, justify="left" if col == "device" else "right", no_wrap=True)
    for row in summary.devices:
        error = row.busy_error
        used = row.peak_memory / row.memory_capacity if row.memory_capacity else 0.0
        table.add_row(Text(row.name), f"{row.samples_per_s:,.0f}", f"{row.step_s * 1e3:.2f}",
                      f"{row.compute_share:.0%}/{row.wait_share:.0%}",
                      f"{max(0.0, 1.0 - row.compute_share - row.wait_share):.0%}",
                      f"{row.peak_memory / 2**20:,.0f}M {used:.0%}",
                      "n/a" if row.gpu_util is None else f"{row.gpu_util:.0f}%",
                      f"{row.busy_s * 1e3:.2f}",
                      "n/a" if row.simulated_busy_s is None
                      else f"{row.simulated_busy_s * 1e3:.2f}",
                      "n/a" if error is None else f"{error:+.0%}",
                      style="bold red" if row.deviates else None)
    console.print(table)
    simulated = summary.simulated_iteration_s
    error = summary.iteration_error
    console.print(f"iteration {summary.iteration_s * 1e3:.2f} ms measured, "
                  + (f"{simulated * 1e3:.2f} ms simulated ({error:+.0%}); " if simulated
                     else "")
                  + f"{summary.samples_per_s:,.1f} samples/s", highlight=False)
    said = []
    last = figures.last_loss
    if last is not None:
        said.append(f"loss {last.loss:.6g} at step {last.step:,}")
    if figures.tokens_per_s is not None:
        said.append(f"{figures.tokens_per_s:,.0f} tokens/s")
    if figures.mfu is not None:
        said.append(f"MFU {figures.mfu:.2%}"
                    + (" (of an estimated CPU peak)" if figures.work.peak_estimated else ""))
    if said:
        console.print("; ".join(said), highlight=False)


def _report_check(outcome, records: list[RankRecord], console: Console,
                  as_json: bool, graph, strategy, optimizer, figures: RunFigures) -> int:
    from flextui.runtime.check import check_result, check_rule, referee_of
    result = check_result(outcome, records, referee_of(graph, strategy),
                          check_rule(strategy, optimizer))
    if as_json:  # each step as the launcher summed it, beside the ranks' all-reduced sums
        emit_json({**result.to_dict(), "per_step": [row.to_dict() for row in figures.rows]})
    elif result.equal:
        console.print(f"check passed: {result.ranks} ranks equal {result.referee} to "
                      f"{result.worst:.1e} (tolerance {result.rule.tolerance:.0e}"
                      + ("" if result.rule.params else ", the loss") + ") over "
                      f"{result.steps} steps", highlight=False)
    else:
        console.print(f"[red]check failed[/]: {escape(result.message)}", highlight=False)
    return 0 if result.equal else EXIT_FAILED
