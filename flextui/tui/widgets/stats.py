"""The Search screen's figures: state, time against budget, steps and simulations per
second, acceptance rate, best and current cost, and the costs of data parallelism and
the expert strategy with the best's speedup over each."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from flextui.session.jobs import JobState
from flextui.session.search_watch import SearchView

STATE_STYLES = {JobState.STARTING: "yellow", JobState.WAITING: "yellow",
                JobState.RUNNING: "bold green", JobState.PAUSED: "bold yellow",
                JobState.FINISHED: "bold cyan", JobState.STOPPED: "bold cyan",
                JobState.FAILED: "bold red"}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.3f} ms"


def _speedup(value: float | None) -> Text:
    """The best's speedup over a baseline, as "(1.31×)"."""
    if value is None:
        return Text("")
    return Text(f"({value:.2f}×)", style="bold green" if value > 1.0005 else "dim")


def stats_table(view: SearchView, budget: str, speed: float | None = None) -> Table:
    """The figures; ``speed`` is a replay's playback speed (None for a live search)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=9)
    grid.add_column(no_wrap=True, overflow="ellipsis")
    state = view.state + (f" ({view.reason})" if view.reason else "")
    grid.add_row("state", Text(state, style=STATE_STYLES[view.state]))
    if speed is not None:
        grid.add_row("playback", f"{speed:g}× real time")
    grid.add_row("time", f"{view.elapsed:,.1f} s of {budget}")
    grid.add_row("steps", f"{view.steps:,}  ({view.sims_per_s:,.0f}/s)")
    grid.add_row("accepted", f"{view.acceptance_rate:.0%}")
    grid.add_row("best", Text(_ms(view.best_cost), style="bold"))
    grid.add_row("current", _ms(view.current_cost))
    for label, name in (("data par.", "data-parallel"), ("expert", "expert")):
        grid.add_row(label, Text.assemble(_ms(view.baselines.get(name)), " ",
                                          _speedup(view.speedup_over(name))))
    return grid


class SearchStats(Static):
    def show(self, view: SearchView, budget: str, speed: float | None = None) -> None:
        self.update(stats_table(view, budget, speed))
