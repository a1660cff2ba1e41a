"""Profiling speed: the time to profile every task Inception-v3 can produce for up to 16
devices (every block shape of every config a search may visit), cold (an empty cache)
and warm (everything cached), on the local GPU or, without one, the CPU.

On a CPU keep the batch small (the default there is 1); on a GPU the default is the
model's batch of 64.

    python benchmarks/profile_speed.py [--model inception_v3] [--batch-size N]
                                       [--max-devices 16] [--repeats R] [--device cuda:0]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from flextui.cost.localdevice import resolve_device
from flextui.cost.profile import prepare_profile
from flextui.graph.library import load_model


def timed_run(graph, max_devices: int, device: str, directory: str, warmup: int,
              repeats: int) -> tuple[float, int, int]:
    """Seconds, tasks measured, out-of-memory tasks — the cache opened afresh each run, as
    a new process would open it."""
    start = time.perf_counter()
    run = prepare_profile(graph, max_devices, device=device, profiles=directory)
    oom = []
    measured = run.run(warmup=warmup, repeats=repeats,
                       on_event=lambda e: oom.append(1) if e.entry.oom else None)
    return time.perf_counter() - start, measured, len(oom)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception_v3")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-devices", type=int, default=16)
    parser.add_argument("--device")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    local = resolve_device(args.device)
    gpu = local.device.type == "cuda"
    batch = args.batch_size or (64 if gpu else 1)
    repeats = args.repeats or (10 if gpu else 3)
    graph = load_model(args.model, batch_size=batch)
    device = str(local.device)
    with tempfile.TemporaryDirectory() as directory:
        tasks = len(prepare_profile(graph, args.max_devices, device=device,
                                    profiles=directory).signatures)
        print(f"{args.model}, batch {batch}, up to {args.max_devices} devices: {tasks:,} "
              f"distinct tasks; on {local.name} ({torch.get_num_threads()} CPU threads), "
              f"warm-up {args.warmup}, repeats {repeats}")
        run = (graph, args.max_devices, device, directory, args.warmup, repeats)
        cold, measured, oom = timed_run(*run)
        print(f"cold: {cold:8.2f} s  ({measured:,} measured, {oom} out of memory)", flush=True)
        warm, again, _ = timed_run(*run)
        print(f"warm: {warm:8.3f} s  ({again} measured: all from the cache)")
    print(f"cached run {cold / warm:,.0f}x faster than the cold one")


if __name__ == "__main__":
    main()
