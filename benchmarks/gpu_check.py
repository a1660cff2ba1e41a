"""The first GPU, used at once: one command that returns the figures a machine with a GPU
owes the README, and needs nothing but flextui and its torch.

1. The device: its name and kind as flextui detects it, memory, torch and CUDA.
2. A profile of the model's tasks on it (``flextui profile``, CUDA events), checked
   against a plain timing of the same kernels: for the largest linear blocks the
   profile measured, ``torch.nn.functional.linear`` on operands of the block's shapes
   timed with a bare pair of ``torch.cuda.Event`` (the median of --repeats).
3. Copies: host to device and back (pinned memory) and device to device, 64 MiB each,
   in GB/s (bytes moved over the median time).
4. The model launched on the GPU (``flextui launch``, one rank, NCCL), twice: once
   against the profile (``--cost profiled``: the step measured against simulated, NVML
   utilisation) and once recording every task's time in the run (``--record-profile``,
   which keeps them apart in ``in-run/``), so the forward and backward tasks measured in the run
   are set beside the same tasks measured alone, summed per kind.

The last lines are a short table of it all; ``--out DIR`` also writes it as JSON.

    python benchmarks/gpu_check.py [--model transformer] [--steps 30] [--out DIR]
    python benchmarks/gpu_check.py --dry-run    # the same on the CPU, a small MLP, gloo

``--dry-run`` runs every step on the CPU (plain timings with a clock instead of CUDA
events, a host copy instead of the three), so CI checks the script without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from flextui.cost.cache import decode_cache
from flextui.cost.cache_dirs import IN_RUN_DIR
from flextui.machine.detect import describe_local, rank_threads

#: the dry run's model: small enough that profiling and two launches take seconds
DRY_RUN_OPTIONS = ["-m", "mlp", "-o", "in_features=256", "-o", "width=256", "-o", "layers=2"]
COPY_BYTES = 64 * 2**20
REFEREE_BLOCKS = 5


def flextui_json(argv: list[str], cwd: Path) -> dict[str, Any]:
    """``flextui ARGV --json`` in ``cwd``; its JSON, or exit naming what failed."""
    proc = subprocess.run([sys.executable, "-m", "flextui", *argv, "--json"], cwd=cwd,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gpu_check: flextui {' '.join(argv)} failed ({proc.returncode}):\n"
                 f"{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def median_s(run: Callable[[], object], device: torch.device, repeats: int) -> float:
    """The median time of ``run``: a bare pair of CUDA events around it on a GPU, the
    host clock after it returns on the CPU; three untimed runs first."""
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            began = time.perf_counter()
            run()
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def cache_entries(directory: Path) -> dict[Any, Any]:
    [path] = directory.glob("*.msgpack")
    return dict(decode_cache(path.read_bytes()).items())


def referee(profile: dict[Any, Any], device: torch.device, repeats: int) -> list[dict[str, Any]]:
    """The profile's largest linear forward blocks against F.linear timed plainly."""
    linear = sorted(((key, entry) for key, entry in profile.items()
                     if key.op_type == "linear" and entry.forward_s),
                    key=lambda item: -item[1].forward_s)[:REFEREE_BLOCKS]
    rows = []
    for key, entry in linear:
        operands = [torch.randn(shape, device=device)
                    for shape in (key.input_shapes[0], *key.param_shapes)]
        plain = median_s(functools.partial(torch.nn.functional.linear, *operands), device,
                         repeats)
        rows.append({"input": key.input_shapes[0], "weight": key.param_shapes[0],
                     "profiled_s": entry.forward_s, "plain_s": plain,
                     "ratio": entry.forward_s / plain})
    return rows


def copies(device: torch.device, repeats: int) -> dict[str, float]:
    """GB/s of each copy of COPY_BYTES (bytes moved over the median time)."""
    count = COPY_BYTES // 4
    if device.type != "cuda":
        a, b = torch.empty(count), torch.empty(count)
        return {"host to host": COPY_BYTES / median_s(lambda: b.copy_(a), device, repeats) / 1e9}
    host = torch.empty(count, pin_memory=True)
    on_device, other = torch.empty(count, device=device), torch.empty(count, device=device)
    runs = {"host to device": lambda: on_device.copy_(host, non_blocking=True),
            "device to host": lambda: host.copy_(on_device, non_blocking=True),
            "device to device": lambda: other.copy_(on_device)}
    return {name: COPY_BYTES / median_s(run, device, repeats) / 1e9 for name, run in runs.items()}


def per_kind(alone: dict[Any, Any], in_run: dict[Any, Any]) -> dict[str, dict[str, float]]:
    """Forward and backward seconds summed over the tasks both caches hold."""
    shared = [key for key in in_run if key in alone]
    sums = {}
    for kind in ("forward_s", "backward_s"):
        pairs = [(getattr(alone[k], kind), getattr(in_run[k], kind)) for k in shared
                 if getattr(alone[k], kind) and getattr(in_run[k], kind)]
        sums[kind.removesuffix("_s")] = {"tasks": len(pairs),
                                         "alone_s": sum(a for a, _ in pairs),
                                         "in_run_s": sum(r for _, r in pairs)}
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="transformer", help="library model (default "
                        "transformer; the dry run uses a small MLP)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per launch")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per plain timing")
    parser.add_argument("--out", type=Path, help="also write the figures as DIR/gpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="every step on the CPU")
    args = parser.parse_args()
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here; --dry-run runs the same steps on the CPU",
              file=sys.stderr)
        sys.exit(2)
    device = torch.device("cpu" if args.dry_run else "cuda:0")
    if args.dry_run:   # the plain timings with the threads a CPU rank and its profile use
        torch.set_num_threads(rank_threads())
    model = DRY_RUN_OPTIONS if args.dry_run else ["-m", args.model]
    where = ["--device", "cpu"] if args.dry_run else []
    ranks = ["--nproc-per-node", "1"] if args.dry_run else []
    steps = ["--steps", str(args.steps), "--warmup", "2"]
    report: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                              "device": describe_local()}
    devices = ", ".join(f"{d['name']} ({d['kind']}, {d['memory_bytes'] / 2**30:.0f} GiB)"
                        for d in report["device"]["devices"])
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}; {devices}")
    with tempfile.TemporaryDirectory() as tmp:
        work, alone = Path(tmp), Path(tmp) / "profiles"
        in_run = alone / IN_RUN_DIR   # where --record-profile writes, apart from the profile
        began = time.perf_counter()
        flextui_json(["profile", *model, *where, "--max-devices", "1", "--profiles", str(alone)],
                     work)
        report["profile_s"] = time.perf_counter() - began
        profile = cache_entries(alone)
        report["referee"] = referee(profile, device, args.repeats)
        report["copies_gb_s"] = copies(device, args.repeats)
        launch = flextui_json(["launch", *model, *ranks, *steps, "--cost", "profiled",
                               "--profiles", str(alone), "--run-log", str(work / "a.ffrun")],
                              work)
        report["step"] = {key: launch[key] for key in ("iteration_s", "simulated_iteration_s",
                                                       "iteration_error", "samples_per_s")}
        report["step"]["gpu_util"] = launch["devices"][0]["gpu_util"]
        flextui_json(["launch", *model, *ranks, *steps, "--record-profile", "--profiles",
                      str(alone), "--run-log", str(work / "b.ffrun")], work)
        report["per_kind"] = per_kind(profile, cache_entries(in_run))
    print_report(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))


def print_report(report: dict[str, Any]) -> None:
    print(f"profile: {len(report['referee'])} linear blocks checked; the profile in "
          f"{report['profile_s']:.1f} s")
    for row in report["referee"]:
        print(f"  linear {row['input']} x {row['weight']}: profiled {row['profiled_s'] * 1e3:.4f}"
              f" ms, plain {row['plain_s'] * 1e3:.4f} ms ({row['ratio']:.2f}x)")
    print("copies: " + ", ".join(f"{name} {gb:.1f} GB/s"
                                 for name, gb in report["copies_gb_s"].items()))
    for kind, row in report["per_kind"].items():
        ratio = row["in_run_s"] / row["alone_s"] if row["alone_s"] else float("nan")
        print(f"{kind:>8}: {row['tasks']} tasks, {row['in_run_s'] * 1e3:.3f} ms in the run, "
              f"{row['alone_s'] * 1e3:.3f} ms alone ({ratio:.2f}x)")
    step = report["step"]
    util = "n/a" if step["gpu_util"] is None else f"{step['gpu_util']:.0f}%"  # NVML: 0-100
    print(f"    step: {step['iteration_s'] * 1e3:.2f} ms measured, "
          f"{step['simulated_iteration_s'] * 1e3:.2f} ms simulated "
          f"({step['iteration_error']:+.0%}); {step['samples_per_s']:,.0f} samples/s; "
          f"GPU utilisation {util}")


if __name__ == "__main__":
    main()
