"""The Search screen: a search live (a ``LiveSearch`` running off the UI thread) or
played back from its log (a ``Playback``). A timer polls the source a few times a
second, so however fast the search runs the screen redraws at most that often; the
tables are redrawn only when the best strategy changes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, cast

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, ProgressBar, TabbedContent, TabPane

from flextui.cost.model import CostModel
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.files import default_export_path, searched_strategy_name
from flextui.search.options import SearchOptions
from flextui.session.jobs import JobState
from flextui.session.live_search import LiveSearch
from flextui.session.playback import Playback
from flextui.session.search_watch import SearchView
from flextui.session.source import SearchSource
from flextui.strategy import Strategy, builtin_strategy, save_strategy
from flextui.tui.screens.keys import KeyScreen
from flextui.tui.widgets.chart import Chart
from flextui.tui.widgets.search_charts import cost_chart, frontier_chart
from flextui.tui.widgets.stats import SearchStats
from flextui.tui.widgets.strategy import StrategyMap, StrategyTable

if TYPE_CHECKING:
    from flextui.tui.app import FlextuiApp

REFRESH_S = 0.25   # how often the screen polls the search: at most 4 redraws a second

LIVE_ONLY = {"pause", "stop"}
REPLAY_ONLY = {"play", "step", "faster", "slower", "to_end"}
TABS = {"tab-strategy": "Strategy", "tab-map": "Map", "tab-frontier": "Frontier"}


@dataclass(frozen=True)
class SearchSetup:
    """What a search (live or replayed) ran on: for the timeline, exports and titles."""

    graph: OpGraph
    cluster: Cluster
    cost_model: CostModel
    options: SearchOptions
    title: str


def budget_text(options: SearchOptions) -> str:
    parts = []
    if options.time_limit is not None:
        parts.append(f"{options.time_limit:g} s")
    if options.iterations is not None:
        parts.append(f"{options.iterations * options.chains:,} steps")
    return " / ".join(parts) or "no budget"


class SearchScreen(KeyScreen):
    #: the footer shows what fits in 80 columns (with the app's Keys and Quit); the
    #: Help screen and ctrl+p list every key
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "pause", "Pause"),
        Binding("x", "stop", "Stop"),
        Binding("space", "play", "Play/pause"),
        Binding("n", "step", "Step", show=False),
        Binding("right_square_bracket,plus", "faster", "Faster", show=False),
        Binding("left_square_bracket,minus", "slower", "Slower", show=False),
        Binding("end", "to_end", "To end", show=False),
        Binding("t", "timeline", "Timeline"),
        Binding("s", "save", "Save best"),
        Binding("l", "launch", "Launch best"),
        Binding("g", "toggle_axis", "Steps/time", show=False),
        *(Binding(str(i), f"show_tab('{tab}')", f"{label} tab", show=False)
          for i, (tab, label) in enumerate(TABS.items(), 1)),
        Binding("escape", "back", "Back"),
    ]
    STARTS_WORK = frozenset({"launch"})

    def __init__(self, source: LiveSearch | Playback, setup: SearchSetup,
                 log_path: str | None = None) -> None:
        super().__init__()
        self.source: SearchSource = source
        self.setup = setup
        #: the search's controls: a live search pauses and stops, a replay plays, steps
        #: and changes speed; exactly one of the two is set
        self.live = source if isinstance(source, LiveSearch) else None
        self.playback = source if isinstance(source, Playback) else None
        self.replay = self.playback is not None
        self.log_path = log_path
        self.by_time = False
        self.view: SearchView | None = None
        self._shown_version = -1
        self._clock = time.monotonic()
        self._failure_shown = False
        self._actions_state: tuple[bool, bool] | None = None

    @property
    def help_section(self) -> str:
        return "replay" if self.replay else "search"

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="search-top"):
            with Vertical(id="search-stats", classes="panel"):
                yield SearchStats(id="stats")
                yield ProgressBar(id="budget", show_eta=False)
            yield Chart(id="cost-plot", classes="panel")
        with TabbedContent(id="search-tabs"):
            with TabPane(TABS["tab-strategy"], id="tab-strategy"):
                yield StrategyTable(id="strategy-table")
            with TabPane(TABS["tab-map"], id="tab-map"):
                yield StrategyMap(id="strategy-map")
            with TabPane(TABS["tab-frontier"], id="tab-frontier"):
                yield Chart(id="frontier-plot")
        yield Footer(compact=True, show_command_palette=False)  # its keys fill 80 columns

    def on_mount(self) -> None:
        self.title = self.setup.title
        where = Path(self.log_path).name if self.log_path else ""
        self.sub_title = f"replay of {where}" if self.replay else f"search · log {where}"
        self.query_one("#search-stats").border_title = "search"
        self.query_one("#cost-plot").border_title = "cost per iteration (ms)"
        self.refresh_view()
        self.set_interval(REFRESH_S, self.refresh_view)

    # -- drawing ------------------------------------------------------------------------

    def refresh_view(self) -> None:
        now = time.monotonic()
        if self.playback is not None:
            self.playback.advance(now - self._clock)
        self._clock = now
        view = self.view = self.source.view()
        speed = self.playback.speed if self.playback is not None else None
        self.query_one(SearchStats).show(view, budget_text(self.setup.options), speed)
        bar = self.query_one(ProgressBar)
        bar.update(total=1.0, progress=view.progress if view.progress is not None else 0.0)
        self.query_one("#cost-plot", Chart).data = cost_chart(view, self.by_time)
        self.query_one("#frontier-plot", Chart).data = frontier_chart(view)
        if view.best_version != self._shown_version:
            self._shown_version = view.best_version
            graph = self.setup.graph
            self.query_one(StrategyTable).show(view.best, graph)
            self.query_one(StrategyMap).show(view.best, graph, self.setup.cluster.num_devices)
        if view.state == JobState.FAILED and not self._failure_shown:
            self._failure_shown = True
            cast("FlextuiApp", self.app).show_error("The search failed", view.message or "")
        ended = self.live is not None and self.live.done
        actions_state = (ended, view.best is None)   # what check_action reads
        if actions_state != self._actions_state:   # the footer recomposes on a refresh
            self._actions_state = actions_state
            self.refresh_bindings()

    # -- actions ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in LIVE_ONLY:   # hidden once the search has ended
            return self.live is not None and not self.live.done
        if action in REPLAY_ONLY:
            return self.replay
        if action == "launch" and self.setup.cluster.nodes > 1:
            return False   # hidden: a launch from the app runs on this machine's devices
        if action in ("timeline", "save", "launch"):
            return True if self.view is not None and self.view.best is not None else None
        return True

    def action_pause(self) -> None:
        if self.live is None:
            return
        paused = self.live.toggle_pause()
        self.notify("search paused" if paused else "search resumed", timeout=2)
        self.refresh_view()

    def action_stop(self) -> None:
        if self.live is None:
            return
        self.live.stop()
        self.notify("stopping: the best strategy found is kept", timeout=3)

    def action_play(self) -> None:
        self._replay_control(lambda playback: playback.toggle())

    def action_step(self) -> None:
        self._replay_control(lambda playback: playback.step())

    def action_faster(self) -> None:
        self._replay_control(lambda playback: playback.faster(True))

    def action_slower(self) -> None:
        self._replay_control(lambda playback: playback.faster(False))

    def action_to_end(self) -> None:
        self._replay_control(lambda playback: playback.to_end())

    def _replay_control(self, act: Callable[[Playback], object]) -> None:
        if self.playback is not None:
            act(self.playback)
            self.refresh_view()

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#search-tabs", TabbedContent).active = tab

    def action_toggle_axis(self) -> None:
        self.by_time = not self.by_time
        self.refresh_view()

    def action_save(self) -> None:
        """Export the best strategy as JSON next to the log (the log itself is written
        as the search runs)."""
        if self.view is None or self.view.best is None:
            return
        setup = self.setup
        path = default_export_path(self.log_path, setup.graph, setup.cluster)
        strategy = Strategy(self.view.best, name=searched_strategy_name(setup.options.seed))
        try:
            save_strategy(path, strategy, setup.graph, setup.cluster)
        except (OSError, FlextuiError) as exc:
            cast("FlextuiApp", self.app).show_error("Could not save the strategy", str(exc))
            return
        where = f"; the search log is {self.log_path}" if self.log_path else ""
        self.notify(f"saved the best strategy to {path}{where}", timeout=6)

    def action_timeline(self) -> None:
        if self.view is None or self.view.best is None:
            return
        best = self.view.best
        self.notify("simulating the best strategy and data parallelism…", timeout=2)
        self.run_worker(lambda: self._timelines(best), thread=True, exclusive=True,
                        group="timeline")

    def _timelines(self, best: Strategy) -> None:
        """On a worker thread: simulate the best strategy and data parallelism, then
        open the Timeline screen on the UI thread."""
        from flextui.search.baselines import search_simulator
        from flextui.tui.screens.timeline import TimelineScreen
        setup = self.setup
        simulator = search_simulator(setup.graph, setup.cluster, setup.cost_model, setup.options)
        try:
            ours = simulator.simulate(best)
            data_parallel = builtin_strategy("data-parallel", setup.graph, setup.cluster)
            dp = simulator.simulate(data_parallel)
        except FlextuiError as exc:
            app = cast("FlextuiApp", self.app)
            app.call_from_thread(app.show_error, "Could not simulate", str(exc))
            return
        screen = TimelineScreen(ours, setup.graph, setup.title,
                                strategy=Strategy(best, name="best found"),
                                compare=("data parallel", dp, data_parallel))
        self.app.call_from_thread(self.app.push_screen, screen)

    def action_launch(self) -> None:
        """Train the best strategy for real on the search's devices here (the Launch
        screen); a search still running goes on."""
        if self.view is None or self.view.best is None:
            return
        setup = self.setup
        best = Strategy(self.view.best, name=searched_strategy_name(setup.options.seed))
        cast("FlextuiApp", self.app).launch_strategy(setup.graph, setup.cluster, best,
                                                     setup.cost_model, setup.title)

    def action_back(self) -> None:
        if self.live is not None and not self.live.done:
            self.live.stop()
            self.notify("search stopped; its log and best strategy are kept", timeout=3)
        self.app.pop_screen()
