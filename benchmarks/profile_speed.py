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

from flextui.cost.cache import ProfileCache
from flextui.cost.localdevice import resolve_device
from flextui.cost.profile import profile_tasks
from flextui.cost.signatures import Measurement, task_signatures
from flextui.graph.library import load_model


def timed_run(signatures, directory, local, warmup: int, repeats: int) -> tuple[float, int, int]:
    """Seconds, tasks measured, out-of-memory tasks — a fresh cache object each run, as
    a new process would open it."""
    start = time.perf_counter()
    cache = ProfileCache(local.name, [directory])
    oom = []
    measured = profile_tasks(signatures, cache, local.device, warmup=warmup, repeats=repeats,
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
    measurement = Measurement("float32", True, local.name, torch.__version__)
    signatures = task_signatures(graph, measurement, num_devices=args.max_devices)
    print(f"{args.model}, batch {batch}, up to {args.max_devices} devices: "
          f"{len(signatures):,} distinct tasks; on {local.name} "
          f"({torch.get_num_threads()} CPU threads), warm-up {args.warmup}, repeats {repeats}")
    with tempfile.TemporaryDirectory() as directory:
        cold, measured, oom = timed_run(signatures, directory, local, args.warmup, repeats)
        print(f"cold: {cold:8.2f} s  ({measured:,} measured, {oom} out of memory)", flush=True)
        warm, again, _ = timed_run(signatures, directory, local, args.warmup, repeats)
        print(f"warm: {warm:8.3f} s  ({again} measured: all from the cache)")
    print(f"cached run {cold / warm:,.0f}x faster than the cold one")


if __name__ == "__main__":
    main()
