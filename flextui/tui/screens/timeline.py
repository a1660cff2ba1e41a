"""The Timeline screen: a Gantt chart of one strategy's simulated iteration, the
selected task's details, per-device busy and memory bars, and (with ``c``) the same
view of a second strategy on the same time scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static

from flextui.graph import OpGraph
from flextui.session.gantt import (
    KIND_GLYPHS,
    SELECTED_GLYPH,
    format_ms,
    format_window,
    task_details,
)
from flextui.sim.timeline import Timeline
from flextui.strategy import Strategy
from flextui.tui.screens.keys import KeyScreen
from flextui.tui.widgets.gantt import Gantt
from flextui.tui.widgets.usage import UsageBars

PAIR_GAP = "   "


@dataclass(frozen=True)
class Shown:
    """One of the timelines the screen flips between."""

    label: str
    timeline: Timeline
    strategy: Strategy | None


class Flow:
    """Groups of ``label value`` pairs: each group starts a line, and its pairs are
    packed greedily into lines of the width available."""

    def __init__(self, groups: list[list[tuple[str, str]]]) -> None:
        self.groups = groups

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for group in self.groups:
            line = Text()
            for label, value in group:
                pair = Text.assemble((label, "dim"), " ", value)
                if line and line.cell_len + len(PAIR_GAP) + pair.cell_len > options.max_width:
                    yield line
                    line = Text()
                line.append_text(Text(PAIR_GAP) + pair if line else pair)
            yield line


class TimelineScreen(KeyScreen):
    """``compare`` is ``(label, timeline)`` or ``(label, timeline, strategy)``: the
    strategy, when given, lets its tasks show their block shapes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("c", "compare", "Compare",
                tooltip="Flip between this strategy's timeline and the compared one's"),
    ]

    def __init__(self, timeline: Timeline, graph: OpGraph, title: str,
                 strategy: Strategy | None = None,
                 compare: tuple[str, Timeline] | tuple[str, Timeline, Strategy | None] | None = None
                 ) -> None:
        super().__init__()
        self.graph, self.title_text = graph, title
        label = strategy.name if strategy is not None and strategy.name else "strategy"
        self.shown = [Shown(label, timeline, strategy)]
        if compare is not None:
            other, *rest = compare[1:]
            self.shown.append(Shown(compare[0], other, rest[0] if rest else None))
        self.current = 0
        self.limit = max(s.timeline.makespan for s in self.shown)

    @property
    def showing(self) -> Shown:
        return self.shown[self.current]

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="timeline-title")
        yield Gantt(self.showing.timeline, self.limit, id="timeline-gantt")
        yield Static(id="timeline-legend")
        with Horizontal(id="timeline-bottom"):
            with VerticalScroll(id="timeline-details", classes="panel"):
                yield Static(id="timeline-task")
            with VerticalScroll(id="timeline-usage", classes="panel"):
                yield UsageBars(self.showing.timeline)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#timeline-usage").border_title = "devices"
        self.query_one(Gantt).focus()

    def _title(self) -> Text:
        """The title, the shown strategy's iteration time, and the other's for scale."""
        text = Text.assemble((self.title_text, "bold"), f" · {self.showing.label} ",
                             (format_ms(self.showing.timeline.makespan), "bold"))
        if len(self.shown) > 1:
            other = self.shown[1 - self.current]
            ratio = other.timeline.makespan / self.showing.timeline.makespan \
                if self.showing.timeline.makespan > 0 else 1.0
            text.append(f" · vs {other.label} {format_ms(other.timeline.makespan)} "
                        f"({ratio:.2f}×)")
        return text

    def _legend(self) -> Text:
        """The glyph of each kind the timeline has (in its colour), and the window shown."""
        gantt = self.query_one(Gantt)
        text = Text(no_wrap=True, overflow="crop")
        kinds = self.showing.timeline.kinds
        for kind, glyph in KIND_GLYPHS.items():
            if kind not in kinds:
                continue
            text.append(glyph, gantt.get_component_rich_style(f"gantt--{kind.name.lower()}"))
            text.append(f" {kind.name.lower()} ")
        text.append(f"{SELECTED_GLYPH} selected")
        window = format_window(gantt.view.t0, gantt.view.t1)
        width = self.query_one("#timeline-legend").content_size.width
        gap = max(1, width - text.cell_len - len(window))
        text.append(" " * gap + window, "dim")
        return text

    def on_gantt_task_selected(self, message: Gantt.TaskSelected) -> None:
        panel, task = self.query_one("#timeline-details"), self.query_one("#timeline-task", Static)
        if message.task is None:
            panel.border_title = Text(message.lane.name)   # a name, never markup
            task.update("no tasks on this lane")
            return
        shown = task_details(message.task, self.graph, self.showing.strategy,
                             self.showing.timeline.bucket_params)
        panel.border_title = Text(shown.title)
        task.update(Flow(shown.groups))

    def on_gantt_view_changed(self) -> None:
        self.query_one("#timeline-legend", Static).update(self._legend())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return len(self.shown) > 1 if action == "compare" else True

    def action_compare(self) -> None:
        """Flip to the other timeline, keeping the window and the selected lane."""
        self.current = 1 - self.current
        self.query_one(Gantt).show(self.showing.timeline, self.limit, keep_view=True)
        self.query_one(UsageBars).show(self.showing.timeline)
        self.query_one("#timeline-title", Static).update(self._title())
