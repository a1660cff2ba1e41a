"""The Profile screen: a ``LiveProfile`` measuring the model's tasks on a local device
off the UI thread; progress, cache hits, out-of-memory blocks, and when it ends, how the
measured times compare with the analytic model's per op type."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Footer, Header, ProgressBar, Static

from flextui.cost.estimate import duration
from flextui.session.jobs import JobState
from flextui.session.live_profile import LiveProfile, ProfileView
from flextui.tui.screens.keys import KeyScreen
from flextui.tui.widgets.stats import STATE_STYLES

if TYPE_CHECKING:
    from flextui.tui.app import FlextuiApp

REFRESH_S = 0.25


def profile_table(view: ProfileView) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=9)
    grid.add_column(overflow="fold")
    grid.add_row("state", Text(view.state, style=STATE_STYLES[view.state]))
    grid.add_row("device", Text(view.device or "…"))   # names from files, never markup
    left = f", {duration(view.remaining_s)} left" if view.remaining_s is not None else ""
    grid.add_row("tasks", f"{view.done:,} of {view.total:,}  ({view.elapsed:,.1f} s{left})")
    grid.add_row("measured", f"{view.measured:,} now, {view.cached:,} from the cache"
                 + (f", {view.oom:,} out of memory" if view.oom else ""))
    grid.add_row("task", Text(view.current or "—"))
    grid.add_row("cache", Text(view.cache_path or "—"))
    for notice in view.notices:
        grid.add_row("note", Text(notice, style="yellow"))
    if view.message:
        grid.add_row("error", Text(view.message, style="bold red"))
    return grid


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms" if seconds else "—"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


class ProfileScreen(KeyScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "stop", "Stop"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, live: LiveProfile, title: str) -> None:
        super().__init__()
        self.live, self.profile_title = live, title
        self._filled = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="profile-top", classes="panel"):
            yield Static(id="profile-stats")
            yield ProgressBar(id="profile-progress", show_eta=False)
        yield DataTable(id="profile-table", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = self.profile_title
        self.sub_title = f"profile · blocks of every config over {self.live.num_devices} devices"
        self.query_one("#profile-top").border_title = "profiling"
        table = self.query_one(DataTable)
        table.border_title = "measured vs analytic (when done)"
        table.add_columns("op type", "tasks", "forward", "analytic", "ratio", "backward",
                          "analytic", "ratio")
        self.refresh_view()
        self.set_interval(REFRESH_S, self.refresh_view)

    def refresh_view(self) -> None:
        view = self.live.view()
        self.query_one("#profile-stats", Static).update(profile_table(view))
        self.query_one(ProgressBar).update(total=1.0, progress=view.progress)
        if self.live.done and not self._filled:
            self._filled = True
            self._fill_table()
            self.refresh_bindings()
            if view.state == JobState.FAILED:
                cast("FlextuiApp", self.app).show_error("Profiling failed", view.message or "")

    def _fill_table(self) -> None:
        table = self.query_one(DataTable)
        for row in self.live.comparison:
            table.add_row(row.op_type, f"{row.tasks:,}", _ms(row.measured_forward_s),
                          _ms(row.analytic_forward_s), _ratio(row.forward_ratio),
                          _ms(row.measured_backward_s), _ms(row.analytic_backward_s),
                          _ratio(row.backward_ratio))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return None if self.live.done else True
        return True

    def action_stop(self) -> None:
        self.live.stop()
        self.notify("stopping after the task in flight; what was measured is kept", timeout=3)

    def action_back(self) -> None:
        if not self.live.done:
            self.live.stop()
        self.app.pop_screen()
