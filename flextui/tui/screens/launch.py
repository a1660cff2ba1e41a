"""The Launch screen: a strategy training for real (a ``LiveLaunch`` running torchrun off
the UI thread), one line per device, the run against the simulator, the loss of its
steps as a chart beside the throughput, and the ranks' own output. A timer polls the
launch four times a second, so however often ranks report the screen redraws at most
that often; histories and the log pane are bounded.

``b`` runs data parallelism on the same devices once the run has ended (two runs at once
would share the devices) and shows both runs' throughput side by side. It is prepared on
a worker thread (over hosts, a preflight asks each of them), which the app quitting
stops."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, cast

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, RichLog, Static

from flextui.fields import printable
from flextui.runtime.nodes import PreflightStopped
from flextui.session.against_dp import CONTRADICTED, AgainstDataParallel
from flextui.session.jobs import JobState
from flextui.session.launch_watch import LOG_LINES, LaunchView
from flextui.session.live_launch import LiveLaunch
from flextui.tui.screens.keys import KeyScreen
from flextui.tui.widgets.canvas import padded_range
from flextui.tui.widgets.chart import Chart, ChartData, Series
from flextui.tui.widgets.devices import DeviceTable
from flextui.tui.widgets.stats import STATE_STYLES

if TYPE_CHECKING:
    from flextui.tui.app import FlextuiApp

REFRESH_S = 0.25
LOSS_STYLE = "bold yellow"


def _ms(seconds: float | None) -> str:
    return "—" if not seconds else f"{seconds * 1e3:,.2f} ms"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def launch_figures(view: LaunchView, label: str, baseline: LaunchView | None) -> Table:
    """The run's state and totals, measured against simulated, and the baseline's."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=len("throughput"))
    grid.add_column(no_wrap=True, overflow="ellipsis")
    total = view.warmup + view.steps_asked
    grid.add_row("state", Text.assemble((view.state, STATE_STYLES[view.state]),
                                        f"  step {view.steps_done:,} of {total:,} "
                                        f"({view.warmup} warm-up)"))
    grid.add_row("time", f"{_duration(view.elapsed_s)} elapsed, "
                         f"{_duration(view.remaining_s)} left")
    error = view.iteration_error
    grid.add_row("iteration", Text.assemble(
        f"{_ms(view.iteration_s)} measured, {_ms(view.simulated_iteration_s)} simulated ",
        (f"({error:+.0%})" if error is not None else "",
         "bold red" if error is not None and abs(error) > 0.25 else "dim")))
    grid.add_row("throughput", f"{view.samples_per_s:,.0f} samples/s ({label})")
    if baseline is not None:   # a row of its own: the loss chart takes half the width
        grid.add_row("baseline", baseline_line(view, baseline))
    return grid


def baseline_line(view: LaunchView, baseline: LaunchView) -> Text:
    """Data parallelism's throughput, and the strategy's speedup over it measured and
    predicted; a predicted gain measured as a loss in red, with both figures."""
    line = Text(f"{baseline.samples_per_s:,.0f} (data parallel, {baseline.state})")
    against = AgainstDataParallel.of(view.simulated_iteration_s, view.iteration_s,
                                     baseline.simulated_iteration_s, baseline.iteration_s)
    if against.measured is not None:
        style = "bold red" if against.contradicted else \
            "bold green" if against.measured > 1 else "bold"
        line.append(f" · {against.measured:.2f}× measured", style=style)
    if against.predicted is not None:
        line.append(f" · {against.predicted:.2f}× predicted",
                    style="bold red" if against.contradicted else "")
    if against.contradicted:
        line.append(f" · {CONTRADICTED}", style="bold red")
    return line


def loss_chart(view: LaunchView) -> ChartData:
    """The loss of the run's steps (the ranks' shares summed), warm-up steps included;
    its legend says the last."""
    steps = [float(step) for step, _ in view.losses]
    losses = [loss for _, loss in view.losses]
    label = f"loss {losses[-1]:.5g} at step {steps[-1]:,.0f}" if losses else "loss"
    return ChartData(series=(Series(label, steps, losses, LOSS_STYLE, "line", "━"),),
                     x_range=(0.0, max(steps[-1] if steps else 1.0, 1.0)),
                     y_range=padded_range(losses), x_format=lambda v: f"{v:,.0f}",
                     y_format=lambda v: f"{v:.4g}", x_title="step",
                     empty="no loss yet")


class LaunchScreen(KeyScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "stop", "Stop"),
        Binding("b", "baseline", "Data parallel"),
        Binding("escape", "back", "Back"),
    ]
    STARTS_WORK = frozenset({"baseline"})
    DEFAULT_CSS = """
    LaunchScreen #launch-top { height: auto; }
    LaunchScreen #launch-head { height: auto; }
    LaunchScreen #launch-figures { height: auto; width: 3fr; }
    LaunchScreen #launch-loss { height: 5; min-height: 5; width: 2fr; }
    LaunchScreen #launch-log { height: 1fr; min-height: 3; }
    """
    help_section = "launch"

    def __init__(self, live: LiveLaunch, title: str,
                 baseline: Callable[[threading.Event | None], LiveLaunch] | None = None
                 ) -> None:
        super().__init__()
        self.live, self.title_text = live, title
        self._make_baseline = baseline
        self.baseline: LiveLaunch | None = None
        self._baseline_wanted = False
        self._baseline_stop: threading.Event | None = None   # while it is prepared
        self._lines_shown = 0
        self._failure_shown = False
        self._ended = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="launch-top", classes="panel"):
            with Horizontal(id="launch-head"):
                yield Static(id="launch-figures")
                yield Chart(id="launch-loss")
            yield DeviceTable(id="launch-devices")
        yield RichLog(id="launch-log", classes="panel", max_lines=LOG_LINES, wrap=False,
                      markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = self.title_text
        prepared = self.live.prepared
        self.sub_title = (f"launch · {prepared.spec.num_ranks} ranks, "
                          f"{prepared.spec.training.backend} · {prepared.run_log.name}")
        self.query_one("#launch-top").border_title = "devices"
        self.query_one("#launch-log").border_title = "ranks' output"
        self.refresh_view()
        self.set_interval(REFRESH_S, self.refresh_view)

    def refresh_view(self) -> None:
        view = self.live.view()
        baseline = self.baseline.view() if self.baseline is not None else None
        self.query_one("#launch-figures", Static).update(
            launch_figures(view, self.live.label, baseline))
        self.query_one("#launch-loss", Chart).data = loss_chart(view)
        self.query_one(DeviceTable).show(view.devices, view.histories)
        new = view.line_count - self._lines_shown
        if new > 0:
            log = self.query_one(RichLog)
            for rank, line in view.lines[-min(new, len(view.lines)):]:
                log.write(Text(f"[{rank}] " if rank >= 0 else "", style="dim")
                          + Text(printable(line)))   # a rank's output is data: escaped
            self._lines_shown = view.line_count
        if view.state == JobState.FAILED and not self._failure_shown:
            self._failure_shown = True
            where = (f"Rank {view.failed_rank} on {view.host or 'localhost'} failed"
                     if view.failed_rank is not None else "The launch failed")
            cast("FlextuiApp", self.app).show_error(where, view.message or "")
        if self.live.done and not self._ended:
            self._ended = True
            self.refresh_bindings()
            if self._baseline_wanted:
                self._start_baseline()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return not self.live.done or (self.baseline is not None and not self.baseline.done)
        if action == "baseline":
            return self._make_baseline is not None and self.baseline is None \
                and self._baseline_stop is None
        return True

    def action_stop(self) -> None:
        for live in (self.live, self.baseline):
            if live is not None and not live.done:
                live.stop()
        self.notify("stopping: every rank ends; the run log keeps what they reported",
                    timeout=3)

    def action_baseline(self) -> None:
        if not self.check_action("baseline", ()):
            return
        if not self.live.done:
            self._baseline_wanted = True
            self.notify("data parallelism runs on the same devices when this run ends",
                        timeout=4)
            return
        self._start_baseline()

    def _start_baseline(self) -> None:
        """Prepare the baseline on a worker thread, then start it (``_baseline_ready``)."""
        make = self._make_baseline
        assert make is not None
        app = cast("FlextuiApp", self.app)
        stop = self._baseline_stop = app.preparation()
        self._baseline_wanted = False
        self.refresh_bindings()

        def prepare() -> None:
            try:
                live = make(stop)
            except PreflightStopped:
                return   # the app quit, or the screen was left
            except Exception as exc:  # noqa: BLE001 (a refusal, shown; the screen goes on)
                app.call_from_thread(self._baseline_ready, None, str(exc))
                return
            if not stop.is_set():
                app.call_from_thread(self._baseline_ready, live, None)
        app.run_worker(prepare, thread=True, group="baseline")

    def _baseline_ready(self, live: LiveLaunch | None, error: str | None) -> None:
        self._baseline_stop = None
        self.refresh_bindings()
        app = cast("FlextuiApp", self.app)
        if live is None:
            app.show_error("Cannot run data parallelism", error or "")
            return
        self.baseline = live
        live.start()
        app.launches.append(live)

    def action_back(self) -> None:
        if self._baseline_stop is not None:
            self._baseline_stop.set()
        for live in (self.live, self.baseline):
            if live is not None and not live.done:
                live.stop()
        self.app.pop_screen()
