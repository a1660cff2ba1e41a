"""``flextui profile``: measure a model's tasks on a local device into the profile cache,
show a cache, merge caches from two machines, or calibrate communication."""

from __future__ import annotations

import argparse
import threading
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from flextui.cli.common import dtype_arg, emit_json, load_graph, model_args, stop_on_signals
from flextui.errors import FlextuiError
from flextui.limits import read_file

PROGRESS_S = 1.0  # how often the plain (piped) progress prints a line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Time every distinct task (op block) a search of the model over up to "
                     "--max-devices devices may visit, with the torch kernels the runtime runs, "
                     "on a local device, and cache the results (msgpack, one file per device "
                     "kind) for --cost profiled. Tasks already cached are skipped. Also: --show "
                     "a cache, --merge two caches, --comm to calibrate communication between "
                     "the local devices.")
    model_args(p)
    p.add_argument("--device", help="cuda:N or cpu (default: cuda:0, else the CPU)")
    p.add_argument("--max-devices", type=int, default=16, metavar="N",
                   help="profile the blocks of every config over up to N devices (default 16)")
    dtype_arg(p, "the dtype to measure in")
    p.add_argument("--inference", action="store_true", help="forward only")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per task (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--profiles", metavar="DIR", help="the cache directory (default "
                   "$FLEXTUI_PROFILES, else the user's cache directory)")
    p.add_argument("--show", metavar="FILE", help="print a profile cache file (with --model: "
                   "how its times compare with the analytic model's)")
    p.add_argument("--merge", nargs=2, metavar=("A", "B"),
                   help="merge two caches of one device kind into the cache directory")
    p.add_argument("--comm", action="store_true",
                   help="calibrate communication: point-to-point and all-reduce times between "
                   "the local GPUs (NCCL), or two CPU processes (gloo) with --device cpu or no GPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_profile)


def cmd_profile(args: argparse.Namespace, console: Console) -> int | None:
    if args.merge:
        _merge(args, console)
    elif args.show:
        _show(args, console)
    elif args.comm:
        _comm(args, console)
    else:
        return _measure(args, console)
    return None


def _measure(args, console: Console) -> int:
    from flextui.cost.localdevice import resolve_device
    from flextui.cost.profile import prepare_profile
    if args.repeats < 1 or args.warmup < 0:
        raise FlextuiError("--repeats must be at least 1, --warmup at least 0")
    local = resolve_device(args.device)       # a device that is not there: say so first
    graph = load_graph(args)
    run = prepare_profile(graph, args.max_devices, device=local, dtype=args.dtype,
                          training=not args.inference, profiles=args.profiles)
    for notice in run.notices:
        console.print(f"[yellow]{notice}[/]", highlight=False)
    clock = run.clock(warmup=args.warmup, repeats=args.repeats)
    if not args.json:
        _announce(args, console, graph, run, clock.total_s)
    start, stop = time.monotonic(), threading.Event()
    with _ProgressDisplay(console, clock, quiet=args.json) as shown, \
            stop_on_signals(stop) as caught:
        measured = run.run(warmup=args.warmup, repeats=args.repeats, on_event=shown.update,
                           stop=stop.is_set)
    took = time.monotonic() - start
    rows = run.comparison()
    oom = sum(r.oom for r in rows)
    total = len(run.signatures)
    not_measured = total - measured - shown.hits
    summary = {"model": graph.meta.get("model", graph.name), "device": local.name,
               "dtype": run.measurement.dtype, "training": run.measurement.training,
               "tasks": total, "measured": measured, "cached": shown.hits,
               "not_measured": not_measured, "out_of_memory": oom, "elapsed_s": took,
               "interrupted": stop.is_set(), "cache": str(run.cache.path),
               "op_types": [_row_json(r) for r in rows]}
    if args.json:
        emit_json(summary)
        return caught.exit_status
    head = "interrupted" if stop.is_set() else "done"
    console.print(f"{summary['model']} on {local.name}, {head}: {total:,} distinct tasks for up "
                  f"to {args.max_devices} devices; {measured:,} measured now in {took:.1f} s, "
                  f"{shown.hits:,} found in the cache"
                  f"{f', {oom} out of memory' if oom else ''}", highlight=False)
    if not_measured:
        console.print(f"[yellow]{not_measured:,} tasks not measured yet: run the same command "
                      "again to measure them (what is cached is kept)[/]", highlight=False)
    console.print(_comparison_table(rows))
    console.print(f"cache: {run.cache.path}  (use it: flextui search --cost profiled ...)",
                  highlight=False)
    return caught.exit_status


def _announce(args, console: Console, graph, run, estimate_s: float) -> None:
    """What is about to be measured and for how long; when it is long, how to shorten it."""
    from flextui.cost.estimate import LONG_PROFILE_S, duration
    todo = sum(e > 0 for e in run.estimates(warmup=args.warmup, repeats=args.repeats))
    if not todo:
        console.print(f"all {len(run.signatures):,} tasks are in the cache", highlight=False)
        return
    console.print(f"measuring {todo:,} of {len(run.signatures):,} tasks on {run.local.name}: "
                  f"{duration(estimate_s)} (estimated; Ctrl-C stops and keeps what was "
                  "measured)", highlight=False)
    if estimate_s < LONG_PROFILE_S:
        return
    fewer = max(1, args.max_devices // 4)
    hint = ""
    if fewer < args.max_devices:
        smaller = _estimate_over(args, graph, run, fewer)
        hint = f"--max-devices {fewer} ({duration(smaller)}), "
    console.print(f"[yellow]that is long: shorten it with {hint}a smaller batch (-b), or "
                  "profile on a GPU[/]", highlight=False)


def _estimate_over(args, graph, run, num_devices: int) -> float:
    """The estimate of the same profile over ``num_devices`` devices."""
    from flextui.cost.profile import ProfileRun
    from flextui.cost.signatures import task_signatures
    signatures = task_signatures(graph, run.measurement, num_devices=num_devices)
    other = ProfileRun(run.local, run.measurement, signatures, run.cache)
    return other.clock(warmup=args.warmup, repeats=args.repeats).total_s


def _show(args, console: Console) -> None:
    from pathlib import Path

    from flextui.cost.cache import BadDocument, decode_cache
    path = Path(args.show)
    try:
        data = decode_cache(read_file(path, None))
    except OSError as exc:
        raise FlextuiError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except BadDocument as bad:
        raise FlextuiError(f"{path}: {bad.problem}") from None
    try:
        entries = sorted(data.items(), key=lambda ke: (ke[0].op_type, ke[0].output_shapes))
    except BadDocument as bad:
        raise FlextuiError(f"{path}: {bad.problem}") from None
    updates = sorted(data.updates.items())
    if args.json:
        emit_json({"device": data.device_name, "entries": [
            {"key": k.to_map(), "entry": e.to_map()} for k, e in entries], "updates": [
            {"key": k.to_map(), "update": u.to_map()} for k, u in updates]})
        return
    also = f" (and {len(updates)} optimizer updates)" if updates else ""
    console.print(f"{path}: {len(entries):,} tasks measured on "
                  f"{data.device_name}{also}", highlight=False)
    table = Table()
    for col in ("op", "output block", "dtype", "forward", "backward", "spread", "runs", "memory"):
        table.add_column(col, justify="left" if col in ("op", "output block", "dtype") else "right")
    limit = len(entries) if args.model else 40
    for key, entry in entries[:limit]:
        block = "×".join(map(str, key.output_shapes[0])) if key.output_shapes else "—"
        table.add_row(key.op_type, block, key.dtype,
                      _ms(entry.forward_s) if not entry.oom else "out of memory",
                      _ms(entry.backward_s), _ms(entry.forward_spread_s), str(entry.repeats),
                      f"{entry.peak_memory_bytes / 2**20:,.1f} MiB")
    for update_key, update in updates:
        table.add_row(f"{update_key.optimizer} update", f"{update_key.shard_bytes:,} B",
                      update_key.dtype,
                      _ms(update.seconds), "", _ms(update.spread_s), str(update.repeats), "")
    console.print(table)
    if len(entries) > limit:
        console.print(f"... and {len(entries) - limit:,} more (--json lists them all)")
    if not args.model:
        console.print("add --model M to compare these times with the analytic model's")
        return
    _show_comparison(args, console, path.parent, data.device_name, entries)


def _show_comparison(args, console: Console, directory, device_name: str, entries) -> None:
    from flextui.cost.cache import ProfileCache
    from flextui.cost.compare import compare_with_analytic, reference_device
    from flextui.cost.mathmode import measurement_now
    from flextui.cost.signatures import task_signatures
    graph = load_graph(args)
    cache = ProfileCache(device_name, [directory])
    signatures = []
    for dtype, training in sorted({(k.dtype, k.training) for k, _ in entries}):
        measurement = measurement_now(dtype, training, device_name)
        signatures += task_signatures(graph, measurement, num_devices=args.max_devices)
    rows = compare_with_analytic(signatures, cache, reference_device(device_name))
    console.print(_comparison_table(rows))


def _merge(args, console: Console) -> None:
    from pathlib import Path

    from flextui.cost.cache import decode_cache, merge_cache_files
    from flextui.cost.cache_dirs import user_profile_dir
    first = Path(args.merge[0])
    try:
        kind = decode_cache(read_file(first, None)).device_kind
    except Exception:  # noqa: BLE001 (merge_cache_files reports what is wrong with it)
        kind = first.stem
    out = user_profile_dir(args.profiles) / f"{kind}.msgpack"
    count = merge_cache_files(args.merge[0], args.merge[1], out)
    console.print(f"merged {args.merge[0]} and {args.merge[1]} into {out}: {count:,} tasks",
                  highlight=False)


def _comm(args, console: Console) -> None:
    import torch

    from flextui.cost.cache_dirs import user_profile_dir
    from flextui.cost.calibration import fit_latency_bandwidth, save_calibration
    from flextui.cost.comm import measure_comm
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.device == "cpu" or (args.device is None and not gpus):
        devices = ["cpu", "cpu"]
        if args.device is None:
            console.print("[yellow]no GPU is visible to torch: calibrating gloo between two "
                          "CPU processes (loopback)[/]", highlight=False)
    elif args.device is not None:
        raise FlextuiError(f"--comm --device {args.device}: the calibration measures between "
                           "all the local GPUs; leave --device out (or give cpu)")
    elif gpus < 2:
        raise FlextuiError("--comm needs two devices to measure between and this machine has "
                           "one GPU; --device cpu calibrates between two CPU processes instead")
    else:
        devices = [f"cuda:{i}" for i in range(gpus)]

    def progress(done: int, total: int, what: str) -> None:
        if not args.json:
            console.print(f"{done}/{total}  {what}", highlight=False)
    calibrations = measure_comm(devices, repeats=args.repeats, progress=progress)
    directory = user_profile_dir(args.profiles)
    paths = [save_calibration(calibration, directory) for calibration in calibrations]
    if args.json:
        emit_json([{**c.to_dict(), "file": str(path)} for c, path in zip(calibrations, paths)])
        return
    for calibration in calibrations:
        table = Table(title=f"{calibration.backend} over {calibration.link_kind}, "
                      f"{calibration.world_size} ranks on {calibration.device}")
        for col in ("bytes", "point-to-point", "all-reduce"):
            table.add_column(col, justify="right")
        for (size, p2p), (_, allreduce) in zip(calibration.p2p, calibration.allreduce):
            table.add_row(f"{size:,}", _ms(p2p), _ms(allreduce))
        console.print(table)
        for name, rows in (("point-to-point", calibration.p2p),
                           ("all-reduce", calibration.allreduce)):
            latency, bandwidth = fit_latency_bandwidth(rows)
            console.print(f"{calibration.link_kind} {name}: latency {latency * 1e6:,.1f} us, "
                          f"bandwidth {bandwidth / 1e9:,.2f} GB/s (fit)", highlight=False)
    console.print(f"saved to {', '.join(sorted(set(map(str, paths))))}; simulate and search use "
                  "it with --cost profiled", highlight=False)


def _comparison_table(rows) -> Table:
    table = Table(title="measured vs analytic (sum over the tasks measured)")
    for col in ("op type", "tasks", "forward", "analytic", "ratio",
                "backward", "analytic", "ratio"):
        table.add_column(col, justify="left" if col == "op type" else "right")
    for r in rows:
        table.add_row(r.op_type, f"{r.tasks:,}", _ms(r.measured_forward_s),
                      _ms(r.analytic_forward_s), _ratio(r.forward_ratio),
                      _ms(r.measured_backward_s if r.analytic_backward_s else None),
                      _ms(r.analytic_backward_s or None), _ratio(r.backward_ratio))
    return table


def _row_json(r) -> dict:
    return {"op_type": r.op_type, "tasks": r.tasks, "out_of_memory": r.oom,
            "measured_forward_s": r.measured_forward_s, "analytic_forward_s": r.analytic_forward_s,
            "measured_backward_s": r.measured_backward_s,
            "analytic_backward_s": r.analytic_backward_s}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.3f} ms"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


class _ProgressDisplay:
    """A rich progress bar on a terminal; piped, a plain line a second. Both show the
    time left as ``clock`` (:class:`~flextui.cost.estimate.ProfileClock`) reckons it."""

    def __init__(self, console: Console, clock, quiet: bool) -> None:
        self.console, self.clock, self.quiet = console, clock, quiet
        self.total = clock.tasks
        self.hits = self.oom = 0
        self.started = self.shown = time.monotonic()
        self.bar = None
        if console.is_terminal and not quiet:
            self.bar = Progress(TextColumn("profiling"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[note]}"), console=console,
                                transient=True)
            self.task = self.bar.add_task("profile", total=self.total, note="")

    def __enter__(self) -> _ProgressDisplay:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, event) -> None:
        from flextui.cost.estimate import duration
        now = time.monotonic()
        self.clock.task_done(event.done - 1, now - self.started)
        self.hits += event.cached
        self.oom += event.entry.oom
        if event.failure and not self.quiet:
            block = "x".join(map(str, event.signature.block))
            self.console.print(f"[yellow]{event.signature.op.type} {block}: could not run, "
                               f"recorded without times: {escape(event.failure)}[/]",
                               highlight=False)
        left = f"{duration(self.clock.remaining_s)} left" if event.done < self.total else ""
        note = f"{self.hits:,} cached · {event.signature.op.type} · {left}".rstrip(" ·")
        if self.bar is not None:
            self.bar.update(self.task, completed=event.done, note=note)
            return
        if not self.quiet and (now - self.shown >= PROGRESS_S or event.done == self.total):
            self.shown = now
            self.console.print(f"{event.done:,}/{self.total:,} tasks  {note}", highlight=False)
