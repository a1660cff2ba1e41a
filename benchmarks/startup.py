"""Start-up time of the light commands, each in a fresh Python process.

`flextui --help` and `flextui models` (and, for the floor under them, an interpreter
that does nothing): the median and least wall time of --runs runs after one warm-up
run (which fills the file cache), and the load average they ran under. With
--imports N, also the N slowest imports of each command as `python -X importtime`
reports them (cumulative: a package's time includes what it imports).

    python benchmarks/startup.py [--runs 10] [--imports 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = [["--help"], ["models"]]


def flextui_command() -> list[str]:
    """The installed `flextui` script beside this interpreter, else `python -m flextui`."""
    script = Path(sys.executable).with_name("flextui")
    found = script if script.exists() else shutil.which("flextui")
    return [str(found)] if found else [sys.executable, "-m", "flextui"]


def wall_times(command: list[str], runs: int) -> list[float]:
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def slowest_imports(argv: list[str], count: int) -> list[tuple[float, str]]:
    """The ``count`` top-level imports of ``flextui ARGV`` that took longest (seconds,
    cumulative), from ``-X importtime``."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "flextui", *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         check=True)
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        if not name.startswith("  "):     # top level: one space of indent, no nesting
            rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command")
    parser.add_argument("--imports", type=int, default=0, metavar="N",
                        help="also list the N slowest imports of each command")
    args = parser.parse_args()
    flextui = flextui_command()
    cases = [("python -c pass", [sys.executable, "-c", "pass"])]
    cases += [(f"flextui {' '.join(argv)}", [*flextui, *argv]) for argv in COMMANDS]
    print(f"{'command':<18}{'median (s)':>12}{'least (s)':>11}{'runs':>6}")
    for label, command in cases:
        times = wall_times(command, args.runs)
        print(f"{label:<18}{statistics.median(times):>12.3f}{min(times):>11.3f}{len(times):>6}",
              flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load} (1, 5, 15 min) on {os.cpu_count()} cores")
    for argv in COMMANDS if args.imports else []:
        print(f"\nslowest imports of flextui {' '.join(argv)} (cumulative s):")
        for seconds, name in slowest_imports(argv, args.imports):
            print(f"  {seconds:8.3f}  {name}")


if __name__ == "__main__":
    main()
