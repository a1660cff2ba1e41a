"""The flextui app: Setup → Search (live) → Timeline, Setup → Profile, and Replay of a
saved search.

The app only composes screens and hands them core objects: the search runs in a
``LiveSearch`` (off the UI thread, chains in worker processes), a saved log plays back
through a ``Playback``, and timelines come from the simulator on a worker thread.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import signal
import sys
import termios
import threading
from collections.abc import Callable, Iterable
from multiprocessing import resource_tracker
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from flextui.cost import AnalyticCostModel, CostModel, cost_model_from_identity
from flextui.cost.choose import CostKind, choose_cost_model
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.graph.library import model_source
from flextui.machine import Cluster
from flextui.runtime.nodes import PreflightStopped
from flextui.search.baselines import baseline_costs
from flextui.search.files import default_log_path
from flextui.search.log import read_search_log
from flextui.session.launching import (
    LaunchRequest,
    launch_request,
    launch_strategy,
    stand_ins,
)
from flextui.session.live_launch import LiveLaunch
from flextui.session.live_profile import LiveProfile
from flextui.session.live_search import LiveSearch
from flextui.session.playback import Playback
from flextui.strategy import Strategy
from flextui.tui.screens.dialogs import ConfirmDialog, ErrorDialog, OpenLogDialog
from flextui.tui.screens.help import HelpScreen
from flextui.tui.screens.launch import LaunchScreen
from flextui.tui.screens.profile import ProfileScreen
from flextui.tui.screens.search import SearchScreen, SearchSetup
from flextui.tui.screens.setup import SetupScreen

#: signals that quit the app as ctrl+q does: a closed ssh session or tmux window sends
#: SIGHUP, a batch system or ``kill`` SIGTERM, ``kill -INT`` SIGINT (in the app, ctrl+c
#: is a key, not a signal). Textual itself handles only SIGTSTP/SIGCONT (suspend, resume)
#: and SIGWINCH; any other signal would kill the app with its terminal left as it was.
QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class FlextuiApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "flextui"
    #: every screen's footer ends with these two, so help and a way out are always
    #: visible at 80 columns (the Help screen and ctrl+p list every key, ctrl+o too)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark,f1", "help", "Keys"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+o", "open_log", "Replay a log", show=False),
    ]

    def __init__(self, *, model: str | None = None, cluster: str | None = None,
                 replay: str | Path | None = None, log_dir: str | Path = ".",
                 launch: LaunchRequest | None = None) -> None:
        super().__init__()
        # Worker processes need multiprocessing's resource tracker, which starts on first
        # use with a copy of stderr; once the app runs, stderr is Textual's capture (no
        # file descriptor), so start it now.
        resource_tracker.ensure_running()
        self.initial_model, self.initial_cluster = model, cluster
        self.replay_path = Path(replay) if replay is not None else None
        self.launch_request = launch
        self.log_dir = Path(log_dir)
        self.searches: list[LiveSearch] = []
        self.profiles: list[LiveProfile] = []
        self.launches: list[LiveLaunch] = []
        #: what stops each launch being prepared (a preflight's ssh sessions): all set
        #: when the app quits
        self.preparing: list[threading.Event] = []

    def on_mount(self) -> None:
        if not self.is_headless:   # a terminal's app (tests run headless, in their own loop)
            loop = asyncio.get_running_loop()
            for signum in QUIT_SIGNALS:
                loop.add_signal_handler(signum, self.quit_on_signal, signum)
        self.setup_screen = SetupScreen(self.initial_model, self.initial_cluster)
        self.push_screen(self.setup_screen)
        if self.replay_path is not None:
            self.open_replay(self.replay_path)
        if self.launch_request is not None:
            self.start_launch(self.launch_request)

    # -- searches -----------------------------------------------------------------------

    def on_setup_screen_start_search(self, message: SetupScreen.StartSearch) -> None:
        if message.cost == CostKind.ANALYTIC:
            self.start_search(message, AnalyticCostModel())
            return
        self.notify("loading the measured task times…", timeout=2)
        self.run_worker(lambda: self._choose_cost_model(message), thread=True)

    def _choose_cost_model(self, message: SetupScreen.StartSearch) -> None:
        """On a worker thread: the cost model the Setup screen asked for, then the search."""
        try:
            choice = choose_cost_model(message.graph, message.cluster, message.cost,
                                       training=message.options.training)
        except FlextuiError as exc:
            self.call_from_thread(self.show_error, "Cannot use profiled times", str(exc))
            return
        for notice in choice.notices:
            self.call_from_thread(self.notify, notice, timeout=6)
        self.call_from_thread(self.start_search, message, choice.model)

    def on_setup_screen_start_profile(self, message: SetupScreen.StartProfile) -> None:
        # a profile whose screen was left may still be ending: the new one waits for it
        earlier = [p for p in self.profiles if not p.done]
        live = LiveProfile(message.graph, message.cluster.num_devices, after=earlier)
        live.start()
        self.profiles.append(live)
        self.push_screen(ProfileScreen(live, f"{message.model_label} for "
                                             f"{message.cluster_label}"))

    def on_setup_screen_start_launch(self, message: SetupScreen.StartLaunch) -> None:
        graph, cluster = message.graph, message.cluster

        def request(stop: threading.Event) -> LaunchRequest:
            strategy = launch_strategy(message.strategy, graph, cluster)
            choice = choose_cost_model(graph, cluster, message.cost, training=True)
            return launch_request(graph, strategy, cluster, choice.model,
                                  f"{message.model_label} on {message.cluster_label}",
                                  self.log_dir, stop=stop)
        self.prepare_launch(request)

    def start_search(self, message: SetupScreen.StartSearch, cost_model: CostModel) -> None:
        settle_heap()
        graph, cluster, options = message.graph, message.cluster, message.options
        log_path = default_log_path(graph, cluster, self.log_dir)
        live = LiveSearch(graph, cluster, cost_model, options, log_path=log_path)
        live.start()
        self.searches.append(live)
        title = f"{message.model_label} on {message.cluster_label}"
        setup = SearchSetup(graph, cluster, live.cost_model, options, title)
        self.push_screen(SearchScreen(live, setup, str(log_path)))

    # -- launches -------------------------------------------------------------------------

    def start_launch(self, request: LaunchRequest) -> None:
        """Start the launch ``request`` prepared and show it; ``b`` on its screen runs
        data parallelism on the same devices."""
        live = LiveLaunch(request.prepared, request.label)
        live.start()
        self.launches.append(live)
        self.push_screen(LaunchScreen(live, request.title, request.baseline))

    def launch_strategy(self, graph: OpGraph, cluster: Cluster, strategy: Strategy,
                        cost_model: CostModel, title: str) -> None:
        """Launch ``strategy`` (a search's best, say) on ``cluster``'s devices here. A
        replayed search of a PyTorch model runs the model typed in Setup (``flextui
        replay LOG --model FILE`` types it there), if that builds the log's graph."""
        typed = self.setup_screen.typed_model()

        def request(stop: threading.Event) -> LaunchRequest:
            model = model_source(typed) if graph.imported and graph.source is None else None
            return launch_request(graph, strategy, cluster, cost_model, title, self.log_dir,
                                  model=model, stop=stop)
        self.prepare_launch(request)

    def prepare_launch(self, request: Callable[[threading.Event], LaunchRequest]) -> None:
        """Prepare a launch on a worker thread (it simulates the strategy; over hosts, a
        preflight asks each of them), then start it; what stops it is shown in a
        dialog. ``request`` is given the event that stops it (``preparation``): the app
        quitting stops a preflight, which ends every ssh session it started at once."""
        self.notify("preparing the launch…", timeout=2)
        stop = self.preparation()

        def prepare() -> None:
            try:
                prepared = request(stop)
            except PreflightStopped:
                return   # the app is quitting
            except FlextuiError as exc:
                self.call_from_thread(self.show_error, "Cannot launch this strategy", str(exc))
                return
            if not stop.is_set():
                self.call_from_thread(self.start_launch_asking, prepared)
        self.run_worker(prepare, thread=True, group="launch")

    def preparation(self) -> threading.Event:
        """The event that stops a launch about to be prepared: set when the app quits,
        or by the screen that asked for it (left before it was ready)."""
        stop = threading.Event()
        self.preparing.append(stop)
        return stop

    def start_launch_asking(self, request: LaunchRequest) -> None:
        """Start ``request``, once the user has agreed to what stands in for the
        cluster's GPUs when that is CPU processes."""
        stand_in = stand_ins(request.prepared)
        if stand_in is None:
            self.start_launch(request)
            return

        def answered(launch: bool | None) -> None:
            if launch:
                self.start_launch(request)
        self.push_screen(ConfirmDialog("Launch on CPU processes?", stand_in, "Launch anyway"),
                         answered)

    def open_replay(self, path: Path) -> None:
        """Replay the log at ``path``: it is read on a worker thread (a long search's log
        takes seconds), with a notice until its Search screen shows."""
        self.notify(f"opening {path.name}…", timeout=3)
        self.run_worker(lambda: self._replay(path), thread=True, group="replay")

    def _replay(self, path: Path) -> None:
        """On a worker thread: read the log and show it; then simulate data parallelism
        and the expert strategy for the replay's speedups, and start playing."""
        try:
            log = read_search_log(path)
            header = log.header
            cost_model = cost_model_from_identity(header.cost_model)
            options = header.options
            playback = Playback(log)
        except FlextuiError as exc:
            self.call_from_thread(self.show_error, "Cannot replay this log", str(exc))
            return
        settle_heap()
        title = f"{header.graph.meta.get('model', header.graph.name)} on {header.cluster.name}"
        setup = SearchSetup(header.graph, header.cluster, cost_model, options, title)
        self.call_from_thread(self.push_screen, SearchScreen(playback, setup, str(path)))
        try:
            playback.baselines = baseline_costs(setup.graph, setup.cluster, setup.cost_model,
                                                setup.options)
        except FlextuiError as exc:
            self.call_from_thread(self.show_error, "Cannot simulate the baselines", str(exc))
        self.call_from_thread(playback.toggle)

    # -- app-wide -----------------------------------------------------------------------

    def show_error(self, title: str, message: str) -> None:
        self.push_screen(ErrorDialog(title, message))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def action_open_log(self) -> None:
        def opened(path: Path | None) -> None:
            if path is not None:
                self.open_replay(path)
        self.push_screen(OpenLogDialog(), opened)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The built-in commands, and every described key of the current screen."""
        yield from super().get_system_commands(screen)
        for binding in screen.BINDINGS:
            b = binding if isinstance(binding, Binding) else Binding(*binding)
            if b.description and screen.check_action(b.action, ()):
                yield SystemCommand(b.description, f"key: {b.key}",
                                    lambda action=b.action: screen.run_action(action))
        yield SystemCommand("Replay a log", "open a saved search (.ffsearch)", self.action_open_log)

    async def action_quit(self) -> None:
        self.stop_searches()
        self.exit()

    def quit_on_signal(self, signum: int) -> None:
        """Quit as ctrl+q does (every log finished, every worker ended, the terminal
        restored); the process then exits with the shell's code for the signal. When the
        terminal has been hung up there is nothing left to restore, and Textual's writes
        to it would block for ever: exit at once."""
        self.stop_searches()
        if terminal_hung_up():
            os._exit(128 + signum)
        self.exit(return_code=128 + signum)

    def on_unmount(self) -> None:
        """However the app ends (an error, a test's end), no search or profile outlives
        it unfinished."""
        self.stop_searches()

    def stop_searches(self) -> None:
        """Stop every live search, profile and launch and wait for them, so each search
        log gets its final record, each profile cache what was measured, and every rank
        of a launch ends (its run log finished); a launch being prepared stops its
        preflight."""
        for stop in self.preparing:
            stop.set()
        work = [*self.searches, *self.profiles, *self.launches]
        for live in work:
            live.stop()
        for live in work:
            live.join(timeout=10)


def terminal_hung_up() -> bool:
    """The terminal Textual draws on (its stderr) is gone: a closed ssh session or tmux
    window. A hung-up terminal answers every request with EIO."""
    assert sys.__stderr__ is not None  # Textual draws on it
    try:
        termios.tcgetattr(sys.__stderr__.fileno())
    except termios.error as exc:
        return exc.args[0] == errno.EIO
    return False


def settle_heap() -> None:
    """Collect garbage once, then exempt every object alive now (torch, Textual, the
    model) from later collections. A search streams short-lived objects into the app,
    which otherwise triggers a full collection every second or two that walks a few
    hundred thousand long-lived objects: 100–500 ms with the keys frozen
    (``benchmarks/ui_lag.py``)."""
    gc.collect()
    gc.freeze()


def run_app(**kwargs) -> int:
    """Run the app in this terminal; its exit status (128 + the signal's number when a
    signal quit it, else 0)."""
    app = FlextuiApp(**kwargs)
    app.run()
    return app.return_code or 0
