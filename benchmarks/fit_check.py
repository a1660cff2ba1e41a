"""Fitting a model, checked end to end: a search of the GPT-style library model under a
memory budget that data parallelism cannot meet, then the strategy it exports launched
on CPU ranks with ``--check`` (equal to one process in float64).

1. What data parallelism needs a rank (``flextui simulate --json``), against the budget.
2. ``flextui search`` with AdamW on ``local-cpu-R`` under ``--memory-budget`` for
   ``--search-s`` seconds (every move: splits, recomputation, sharding), exporting its
   strategy; what it says of memory and of its choices.
3. ``flextui launch --check`` of that strategy on R CPU ranks with AdamW.

The defaults are the README's GPT-2 XL-sized model (48 layers, width 1600, batch 8, 1.56
billion parameters), whose check holds the one-process referee's float64 training state
(50 GB) beside the ranks': it needs a machine with about 128 GiB of memory, so it has not
run on the 2-core, 24 GiB machine the README was measured on. Smaller models run
anywhere:

    python benchmarks/fit_check.py                      # the GPT-2 XL-sized model
    python benchmarks/fit_check.py --layers 2 --width 64 --heads 4 --seq-len 16 \\
        --vocab 500 --budget 2.4MiB --search-s 20 --ranks 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flextui.machine.units import format_bytes


def flextui(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flextui", *args], capture_output=capture,
                          text=True, check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--width", type=int, default=1600)
    p.add_argument("--heads", type=int, default=25)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--budget", default="16GiB", help="the memory budget a rank (16GiB)")
    p.add_argument("--search-s", type=int, default=150)
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    model = ["-m", "transformer", "-b", str(args.batch), "-o", f"layers={args.layers}",
             "-o", f"width={args.width}", "-o", f"heads={args.heads}"]
    for key, value in (("seq_len", args.seq_len), ("vocab", args.vocab)):
        if value is not None:
            model += ["-o", f"{key}={value}"]
    cluster = ["-c", f"local-cpu-{args.ranks}"]
    dp = flextui("simulate", *model, *cluster, "--optimizer", "adamw", "--json")
    if dp.returncode:
        print(dp.stderr, file=sys.stderr)
        return dp.returncode
    fullest = max(d["memory_bytes"] for d in json.loads(dp.stdout)["devices"])
    print(f"data parallelism needs {format_bytes(fullest)} a rank; budget {args.budget}")
    with tempfile.TemporaryDirectory() as tmp:
        best = Path(tmp) / "best.json"
        started = time.perf_counter()
        found = flextui("search", *model, *cluster, "--optimizer", "adamw",
                        "--memory-budget", args.budget, "--budget", f"{args.search_s}s",
                        "--no-early-stop", "--no-log", "--json", "--export-strategy",
                        str(best))
        if found.returncode:
            print(found.stderr, file=sys.stderr)
            return found.returncode
        s = json.loads(found.stdout)
        stages = ", ".join(f"stage {k}: {n}" for k, n in s["sharded_params"].items())
        print(f"searched {s['iterations']} steps in {time.perf_counter() - started:.0f} s: "
              f"{s['strategy_s'] * 1e3:.2f} ms an iteration, "
              f"{format_bytes(s['strategy_memory_bytes'])} on the fullest rank; "
              f"{s['recomputed_ops']} ops recomputed; parameters sharded: {stages or 'none'}")
        started = time.perf_counter()
        checked = flextui("launch", *model, "--nproc-per-node", str(args.ranks),
                          "--strategy", str(best), "--optimizer", "adamw", "--check",
                          "--json", "--run-log", str(Path(tmp) / "check.ffrun"))
        if not checked.stdout.strip():
            print(checked.stderr, file=sys.stderr)
            return checked.returncode or 1
        c = json.loads(checked.stdout)
        print(f"launch --check on {args.ranks} ranks: {'passed' if c['equal'] else 'FAILED'}, "
              f"{c['worst_relative_error']:.1e} from one process (tolerance "
              f"{c['tolerance']:.0e}) in {time.perf_counter() - started:.0f} s; {c['message']}")
        return checked.returncode

if __name__ == "__main__":
    sys.exit(main())
