"""A line/scatter chart widget on the braille canvas: y labels on the left, the x range
and a legend below. The cost plot and the frontier plot are two of these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.console import Group
from rich.text import Text
from textual.widget import Widget

from flextui.tui.widgets.canvas import Canvas, Scale

Y_LABEL = 9   # columns for the y labels


@dataclass(frozen=True)
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    style: str
    mode: str = "dots"      # dots, line, steps
    glyph: str = "⠂"         # shown in the legend (tells series apart without colour)


@dataclass(frozen=True)
class ChartData:
    series: tuple[Series, ...] = ()
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)
    x_format: Callable[[float], str] = field(default=lambda v: f"{v:g}")
    y_format: Callable[[float], str] = field(default=lambda v: f"{v:.3g}")
    x_title: str = ""
    empty: str = "no data yet"


def chart_rows(data: ChartData, width: int, height: int) -> list[Text]:
    """The chart as ``height`` lines of ``width`` cells."""
    plot_w, plot_h = max(1, width - Y_LABEL), max(1, height - 2)
    canvas = Canvas(plot_w, plot_h)
    sx = Scale(*data.x_range, canvas.dots_x)
    sy = Scale(*data.y_range, canvas.dots_y, flip=True)
    for s in data.series:
        canvas.series(s.xs, s.ys, sx, sy, s.style, connect=s.mode == "line",
                      steps=s.mode == "steps")
    lo, hi = data.y_range
    labels = {0: data.y_format(hi), plot_h - 1: data.y_format(lo)}
    if plot_h >= 5:
        labels[(plot_h - 1) // 2] = data.y_format((lo + hi) / 2)
    rows = []
    for i, row in enumerate(canvas.rows()):
        label = labels.get(i, "")
        rows.append(Text(f"{label[:Y_LABEL - 2]:>{Y_LABEL - 2}} ┤", style="dim") + row)
    if not any(s.xs for s in data.series):
        mid = plot_h // 2
        rows[mid] = Text(" " * Y_LABEL) + Text(data.empty.center(plot_w), style="dim italic")
    left, right = data.x_format(data.x_range[0]), data.x_format(data.x_range[1])
    title = data.x_title.center(max(0, plot_w - len(left) - len(right)))
    rows.append(Text(" " * Y_LABEL + left + title + right, style="dim"))
    legend = Text(" " * Y_LABEL)
    for s in data.series:
        legend.append(f"{s.glyph} ", style=s.style)
        legend.append(f"{s.label}   ")
    rows.append(legend)
    return rows[:height]


class Chart(Widget):
    """Shows a ``ChartData``; set ``data`` to redraw."""

    DEFAULT_CSS = "Chart { height: 1fr; min-height: 6; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._data = ChartData()

    @property
    def data(self) -> ChartData:
        return self._data

    @data.setter
    def data(self, value: ChartData) -> None:
        self._data = value
        self.refresh()

    def render(self) -> Group:
        return Group(*chart_rows(self._data, self.content_size.width, self.content_size.height))
