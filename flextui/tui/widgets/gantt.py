"""The Gantt chart: a row per lane (device or link) under a time axis.

It draws what ``flextui.session.gantt`` computes: each visible row is one call to
``rasterize`` over the current window, so only what is on screen is rasterised.
The selected task is drawn with ``SELECTED_GLYPH`` so it stands out without colour.
With micro-batches, a forward, backward or transfer cell shows its micro-batch's number
(its last digit), so each micro-batch can be followed through the pipeline and the
bubble stands out as idle cells.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from flextui.session.gantt import (
    IDLE_GLYPH,
    KIND_GLYPHS,
    SELECTED_GLYPH,
    Cell,
    Lane,
    View,
    build_lanes,
    nearest_task,
    rasterize,
    short_names,
    ticks,
)
from flextui.sim.taskgraph import TaskKind
from flextui.sim.timeline import TaskTiming, Timeline

#: the kinds whose cells show their micro-batch (``Timeline.microbatches``)
MICRO_KINDS = frozenset({TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.TRANSFER})

PAN_STEP = 0.25
ZOOM = Binding.Group("Zoom")   # one footer entry for both keys
MAX_LABEL = 18
BUSY_WIDTH = 5  # " 100%"
RASTER_CACHE = 512  # rasterised rows kept


class Gantt(Widget, can_focus=True):
    """Lanes of a Timeline over a zoomable, scrollable time window, with a selected
    lane and a selected task on it (posts ``Gantt.TaskSelected`` when it changes)."""

    COMPONENT_CLASSES = {f"gantt--{kind.name.lower()}" for kind in TaskKind} | {
        "gantt--selected", "gantt--label", "gantt--lane-cursor", "gantt--axis"}
    DEFAULT_CSS = """
    Gantt {
        height: 1fr;
    }

    Gantt > .gantt--forward { color: $primary; }
    Gantt > .gantt--backward { color: $secondary; }
    Gantt > .gantt--transfer { color: $warning; }
    Gantt > .gantt--sync { color: $error; }
    Gantt > .gantt--update { color: $success; }
    Gantt > .gantt--gather { color: $error 70%; }
    Gantt > .gantt--selected { color: $accent; text-style: bold; }
    Gantt > .gantt--label { color: $text-muted; }
    Gantt > .gantt--lane-cursor { color: $text; background: $accent 30%; text-style: bold; }
    Gantt:focus > .gantt--lane-cursor { background: $accent 60%; }
    Gantt > .gantt--axis { color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("plus,equals_sign", "zoom(2)", "Zoom in", key_display="+", group=ZOOM),
        Binding("minus", "zoom(0.5)", "Zoom out", key_display="-", group=ZOOM),
        Binding("0", "whole", "Whole iteration", show=False),
        Binding("left,h", "pan(-1)", "Earlier", show=False),
        Binding("right,l", "pan(1)", "Later", show=False),
        Binding("home", "edge(0)", "To start", show=False),
        Binding("end", "edge(1)", "To end", show=False),
        Binding("up,k", "lane(-1)", "Lane up", show=False),
        Binding("down,j", "lane(1)", "Lane down", show=False),
        Binding("tab,right_square_bracket", "step(1)", "Next task", key_display="tab"),
        Binding("shift+tab,left_square_bracket", "step(-1)", "Previous task", show=False),
    ]

    class ViewChanged(Message):
        """The time window changed (``Gantt.view``)."""

    class TaskSelected(Message):
        """The selected task changed (``task`` is None on a lane with no tasks)."""

        def __init__(self, gantt: Gantt, lane: Lane, task: TaskTiming | None) -> None:
            super().__init__()
            self.gantt, self.lane, self.task = gantt, lane, task

        @property
        def control(self) -> Gantt:
            return self.gantt

    def __init__(self, timeline: Timeline, limit: float | None = None, *, name: str | None = None,
                 id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.lanes: list[Lane] = []
        self.labels: list[str] = []
        self.view = View.whole(timeline.makespan)
        self.lane_index = 0
        self.task_index = -1
        self.top = 0  # the first lane on screen
        self._rasters: dict[tuple[int, View, int], list[Cell]] = {}
        self.show(timeline, limit)

    # -- state ------------------------------------------------------------------------

    def show(self, timeline: Timeline, limit: float | None = None, keep_view: bool = False) -> None:
        """Draw ``timeline``; ``limit`` is the time the widest window reaches (default:
        its makespan). With ``keep_view``, the window, the lane (by name, where the new
        timeline has it) and the time selected stay put, so two timelines on the same
        scale can be flipped between."""
        at, lane = self._selected_time(), self.lane
        self.lanes = build_lanes(timeline)
        #: with micro-batches, a compute or transfer cell shows its micro-batch's number
        self.micro_labels = timeline.microbatches > 1
        self._rasters.clear()
        names = [new.name for new in self.lanes]
        self.labels = [name[-MAX_LABEL:] for name in short_names(names)]
        limit = timeline.makespan if limit is None else limit
        self._set_view(self.view.with_limit(limit) if keep_view
                       else View.first(timeline.makespan, limit))
        if not keep_view:
            self._select(0, 0.0)
            return
        index = names.index(lane.name) if lane and lane.name in names else self.lane_index
        self._select(max(min(index, len(self.lanes) - 1), 0), at)

    @property
    def lane(self) -> Lane | None:
        return self.lanes[self.lane_index] if self.lanes else None

    @property
    def selected(self) -> TaskTiming | None:
        lane = self.lane
        return lane.tasks[self.task_index] if lane and self.task_index >= 0 else None

    def _selected_time(self) -> float:
        task = self.selected
        return (task.start + task.end) / 2 if task else (self.view.t0 + self.view.t1) / 2

    def _select(self, lane_index: int, at: float) -> None:
        """Select the task nearest time ``at`` on lane ``lane_index``."""
        self.lane_index = lane_index
        lane = self.lane
        self.task_index = nearest_task(lane, at) if lane else -1
        self._changed()

    def _changed(self) -> None:
        """Bring the selection into view, redraw, and say what is selected."""
        task = self.selected
        if task:
            self._set_view(self.view.reveal(task))
        rows = max(self.size.height - 1, 1)
        top = min(max(self.top, self.lane_index - rows + 1), self.lane_index)
        self.top = max(min(top, len(self.lanes) - rows), 0)
        self.refresh()
        if self.lane and self.is_mounted:
            self.post_message(self.TaskSelected(self, self.lane, task))

    def _set_view(self, view: View) -> None:
        if view != self.view:
            self.view = view
            if self.is_mounted:
                self.post_message(self.ViewChanged())
        self.refresh()

    def on_mount(self) -> None:
        self._changed()

    def on_resize(self) -> None:
        """The same window, drawn at a new width: say so, as for a new window."""
        self.post_message(self.ViewChanged())
        self._changed()

    # -- actions ----------------------------------------------------------------------

    def action_zoom(self, factor: float) -> None:
        task = self.selected
        centre = (task.start + task.end) / 2 if task else None
        self._set_view(self.view.zoom(factor, centre))

    def action_whole(self) -> None:
        self._set_view(View.whole(self.view.limit))

    def action_pan(self, direction: int) -> None:
        self._set_view(self.view.pan(direction * PAN_STEP))

    def action_edge(self, end: int) -> None:
        self._set_view(self.view.end() if end else self.view.start())

    def action_lane(self, delta: int) -> None:
        if self.lanes:
            self._select(min(max(self.lane_index + delta, 0), len(self.lanes) - 1),
                         self._selected_time())

    def action_step(self, delta: int) -> None:
        lane = self.lane
        if lane and lane.tasks:
            self.task_index = min(max(self.task_index + delta, 0), len(lane.tasks) - 1)
            self._changed()

    def on_click(self, event: events.Click) -> None:
        """Select the task under the pointer."""
        lane_index = self.top + event.y - 1
        column = event.x - self.label_width
        if event.y < 1 or lane_index >= len(self.lanes) or not 0 <= column < self.chart_width:
            return
        cells = self._cells(lane_index, self.chart_width)
        if cells[column].task >= 0:
            self.lane_index, self.task_index = lane_index, cells[column].task
            self._changed()

    # -- drawing ----------------------------------------------------------------------

    @property
    def label_width(self) -> int:
        return max((len(label) for label in self.labels), default=0) + BUSY_WIDTH + 1

    @property
    def chart_width(self) -> int:
        return max(self.size.width - self.label_width, 0)

    def render_line(self, y: int) -> Strip:
        if y == 0:
            return self._axis()
        lane_index = self.top + y - 1
        if lane_index >= len(self.lanes):
            return Strip.blank(self.size.width, self.rich_style)
        return self._row(lane_index)

    def _axis(self) -> Strip:
        """The label column says which lanes show; the chart, tick times in ms."""
        rows = max(self.size.height - 1, 1)
        shown = f"{self.top + 1}-{min(self.top + rows, len(self.lanes))}/{len(self.lanes)} ms"
        axis = [" "] * self.chart_width
        for cell, label in ticks(self.view.t0, self.view.t1, self.chart_width):
            text = f"╷{label}"  # ticks leave room for their labels
            if cell + len(text) <= len(axis):
                axis[cell:cell + len(text)] = text
        style = self.get_component_rich_style("gantt--axis")
        label = shown.rjust(self.label_width - 1)[-(self.label_width - 1):] + " "
        return self._strip([Segment(label, style), Segment("".join(axis), style)])

    def _row(self, lane_index: int) -> Strip:
        lane = self.lanes[lane_index]
        width = self.chart_width
        cursor = lane_index == self.lane_index
        label = f"{self.labels[lane_index]:<{self.label_width - BUSY_WIDTH - 1}}{lane.busy:>5.0%}"
        label_style = self.get_component_rich_style(
            "gantt--lane-cursor" if cursor else "gantt--label")
        segments = [Segment(label, label_style), Segment(" ", self.rich_style)]
        marked = self._marked_columns(width) if cursor else range(0)
        cells = self._cells(lane_index, width)
        runs: list[tuple[str, Style]] = []
        for column, cell in enumerate(cells):
            glyph, style = self._glyph(cell.kind, column in marked)
            if self.micro_labels and cell.kind in MICRO_KINDS and column not in marked:
                glyph = str(lane.tasks[cell.task].micro % 10)
            if runs and runs[-1][1] == style:
                runs[-1] = (runs[-1][0] + glyph, style)
            else:
                runs.append((glyph, style))
        segments += [Segment(text, style) for text, style in runs]
        return self._strip(segments)

    def _strip(self, segments: list[Segment]) -> Strip:
        """One line, cut or padded to the widget's width."""
        return Strip(segments).crop_extend(0, self.size.width, self.rich_style)

    def _cells(self, lane_index: int, width: int) -> list[Cell]:
        """The lane rasterised over the current window (kept while a selection moves)."""
        key = (lane_index, self.view, width)
        if key not in self._rasters:
            if len(self._rasters) > RASTER_CACHE:
                self._rasters.clear()
            self._rasters[key] = rasterize(self.lanes[lane_index], self.view.t0, self.view.t1,
                                           width)
        return self._rasters[key]

    def _marked_columns(self, width: int) -> range:
        """The columns the selected task covers: at least one, where it starts."""
        task = self.selected
        return self.view.cells(task.start, task.end, width) if task else range(0)

    def _glyph(self, kind: TaskKind | None, marked: bool) -> tuple[str, Style]:
        if marked:
            return SELECTED_GLYPH, self.get_component_rich_style("gantt--selected")
        if kind is None:
            return IDLE_GLYPH, self.rich_style
        return KIND_GLYPHS[kind], self.get_component_rich_style(f"gantt--{kind.name.lower()}")
