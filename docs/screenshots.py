"""Make the README's screenshots: a real search in the app (Textual's headless driver),
the Search screen when it ends and the Timeline screen of its best strategy, and a real
launch of 2 CPU ranks on the Launch screen, saved as SVG by Textual and converted to PNG
(needs ``pip install cairosvg``).

    python docs/screenshots.py [--model mlp] [--nodes 4] [--seconds 20] [--steps 300]
                               [--profiles DIR]

The launch is measured against profiled task times when ``--profiles`` (or the default
cache) holds them for 2 CPU ranks: ``flextui profile -m lenet -b 32 --device cpu
--max-devices 2`` and ``flextui profile --comm --device cpu``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from pathlib import Path

import cairosvg

from flextui.cost.choose import CostKind, choose_cost_model
from flextui.errors import FlextuiError
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.machine.detect import cpu_ranks
from flextui.runtime.spec import Training
from flextui.search import SearchOptions
from flextui.session.launching import launch_request
from flextui.strategy import builtin_strategy
from flextui.tui.app import FlextuiApp
from flextui.tui.screens.setup import SetupScreen

HERE = Path(__file__).parent
SIZE = (110, 34)
BRAILLE_TEXT = re.compile(r'<text((?=[^>]*>[^<]*[\u2800-\u28ff])[^>]*>)')


def to_png(svg: str, path: Path) -> None:
    """The SVG names Textual's web font; render with a local monospace font that has
    the block glyphs (and DejaVu Sans for runs of braille, which the mono face lacks;
    Textual gives every run its width, so cells stay aligned)."""
    svg = re.sub(r'font-family:\s*"?Fira Code"?[^;"]*', 'font-family: "DejaVu Sans Mono"', svg)
    svg = BRAILLE_TEXT.sub(r'<text style="font-family: DejaVu Sans"\1', svg)
    cairosvg.svg2png(bytestring=svg.encode(), write_to=str(path), output_width=SIZE[0] * 12)
    print(f"wrote {path}")


async def shoot(model: str, nodes: int, seconds: float) -> None:
    graph, cluster = load_model(model), load_named_cluster("p100-4x4", nodes=nodes)
    options = SearchOptions(time_limit=seconds, seed=0)
    with tempfile.TemporaryDirectory() as logs:
        app = FlextuiApp(log_dir=logs)
        async with app.run_test(size=SIZE) as pilot:
            app.on_setup_screen_start_search(SetupScreen.StartSearch(
                graph, cluster, options, model, cluster.name))
            live = app.searches[0]
            while not live.done:
                await pilot.pause(0.2)
            await pilot.pause(0.5)
            to_png(app.export_screenshot(), HERE / "search.png")
            await pilot.press("t")
            while type(app.screen).__name__ != "TimelineScreen":
                await pilot.pause(0.1)
            await pilot.press("down", "tab", "tab", "tab")
            await pilot.pause(0.3)
            to_png(app.export_screenshot(), HERE / "timeline.png")
            await pilot.press("ctrl+q")


async def shoot_launch(steps: int, profiles: str | None) -> None:
    """LeNet under the expert strategy on 2 CPU ranks here, the screen taken when most
    of the steps are done (the sparklines have a history)."""
    graph, cluster = load_model("lenet", batch_size=32), cpu_ranks(2)
    strategy = builtin_strategy("expert", graph, cluster)
    try:  # measured against what the profiled CPU predicts, when it has been profiled
        cost_model = choose_cost_model(graph, cluster, CostKind.PROFILED, profiles=profiles,
                                       training=True).model
    except FlextuiError as exc:
        print(f"analytic task times: {exc}")
        cost_model = choose_cost_model(graph, cluster).model
    with tempfile.TemporaryDirectory() as logs:
        request = launch_request(graph, strategy, cluster, cost_model, "lenet on local-cpu-2",
                                 Path(logs), Training(steps=steps, warmup=3))
        app = FlextuiApp(log_dir=logs, launch=request)
        async with app.run_test(size=SIZE) as pilot:
            while not app.launches:
                await pilot.pause(0.1)
            live = app.launches[0]
            while live.view().steps_done < steps * 0.7 and not live.done:
                await pilot.pause(0.2)
            to_png(app.export_screenshot(), HERE / "launch.png")
            await pilot.press("ctrl+q")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=300, help="steps of the launch")
    parser.add_argument("--profiles", help="the profile cache the launch is simulated with")
    args = parser.parse_args()
    asyncio.run(shoot(args.model, args.nodes, args.seconds))
    asyncio.run(shoot_launch(args.steps, args.profiles))


if __name__ == "__main__":
    main()
