"""Event-loop lag and memory of the app while a search runs.

Runs the app headless (Textual's test driver, a 100x30 terminal) on a live search,
asks the event loop for a tick every 50 ms and records how late each one comes (a late
tick is a late key press), plus the app process's resident memory at the start and
the end of the search and the screen's cost-history length.

    python benchmarks/ui_lag.py [--model inception_v3] [--gpus 16] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions
from flextui.tui.app import FlextuiApp
from flextui.tui.screens.setup import SetupScreen

TICK_S = 0.05


def rss_mib() -> float:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


async def measure(model: str, gpus: int, seconds: float) -> None:
    graph = load_model(model)
    cluster = load_named_cluster("p100-4x4", nodes=gpus // 4)
    options = SearchOptions(time_limit=seconds, seed=0, converge=False)
    with tempfile.TemporaryDirectory() as logs:
        app = FlextuiApp(log_dir=logs)
        async with app.run_test(size=(100, 30)) as pilot:
            await app.workers.wait_for_complete()   # the Setup screen's machine detection
            app.on_setup_screen_start_search(SetupScreen.StartSearch(
                graph, cluster, options, model, cluster.name))
            live = app.searches[0]
            lags, start_rss = [], rss_mib()
            last = time.monotonic()
            while not live.done:
                await asyncio.sleep(TICK_S)
                now = time.monotonic()
                lags.append(now - last - TICK_S)
                last = now
            end_rss = rss_mib()
            view = live.view()
            await pilot.press("ctrl+q")
    lags.sort()
    pct = lambda q: lags[min(len(lags) - 1, int(len(lags) * q))] * 1e3  # noqa: E731
    print(f"{model} on {gpus} GPUs, {seconds:g} s search: {view.steps:,} steps, "
          f"{len(view.history)} history points kept")
    print(f"event-loop lag over {len(lags)} ticks: median {statistics.median(lags) * 1e3:.1f} ms, "
          f"p95 {pct(0.95):.1f} ms, p99 {pct(0.99):.1f} ms, max {lags[-1] * 1e3:.1f} ms")
    print(f"app memory: {start_rss:.0f} MiB at the start, {end_rss:.0f} MiB at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="inception_v3")
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    asyncio.run(measure(args.model, args.gpus, args.seconds))


if __name__ == "__main__":
    main()
