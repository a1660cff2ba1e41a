"""The best strategy, two ways: a table (op, type, parallelism, degrees per dim,
devices) and a strategy map in the spirit of the FlexFlow paper's Figures 12-13 (a
row per op, a column per device, a device's cells in its own colour). Both are cheap to
update while a search runs: the table rewrites only changed cells, the map draws only
the lines on screen."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from flextui.graph import OpGraph
from flextui.strategy import Strategy
from flextui.strategy.summary import device_list, split_text, strategy_rows

# one colour per device, cycling; the column still tells devices apart without colour
DEVICE_COLOURS = ("red", "green", "yellow", "blue", "magenta", "cyan", "bright_red",
                  "bright_green", "bright_yellow", "bright_blue", "bright_magenta",
                  "bright_cyan", "orange3", "purple", "chartreuse3", "deep_pink3")
NAME_WIDTH = 18


class StrategyTable(DataTable):
    """One row per op; ops split beyond the sample dim are shown in bold. Showing a new
    best strategy rewrites only the cells that changed (a search changes a few ops at
    a time; refilling Inception's 300 rows stalled the app for tens of milliseconds)
    and keeps the cursor where it is. Columns widen for a longer cell but never narrow
    (narrowing measures the whole column again)."""

    COLUMNS = ("op", "type", "parallelism", "degrees", "devices")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._shown: dict[str, tuple[Text | str, ...]] = {}   # op -> its row's cells

    def on_mount(self) -> None:
        for column in self.COLUMNS:
            self.add_column(column, key=column)

    def show(self, strategy: Strategy | None, graph: OpGraph) -> None:
        if strategy is None:
            self.clear()
            self._shown = {}
            return
        for row in strategy_rows(strategy, graph):
            style = "bold" if row["parallelism"] not in ("sample", "single") else ""
            cells = (Text(row["op"], style=style), row["type"], row["parallelism"],
                     split_text(row), device_list(row["devices"]))
            shown = self._shown.get(row["op"])
            if shown is None:
                self.add_row(*cells, key=row["op"])
            for column, cell, before in zip(self.COLUMNS, cells, shown or cells):
                if cell != before:
                    width = Text(cell).cell_len if isinstance(cell, str) else cell.cell_len
                    wider = width > self.columns[ColumnKey(column)].content_width
                    self.update_cell(row["op"], column, cell, update_width=wider)
            self._shown[row["op"]] = cells


def map_cell_width(num_devices: int) -> int:
    return 2 if num_devices <= 24 else 1


def map_header(num_devices: int) -> Text:
    """The strategy map's first line: a device number over each device's column."""
    cell = map_cell_width(num_devices)
    text = Text(" " * (NAME_WIDTH + 1), style="dim")
    for d in range(num_devices):
        text.append(f"{d % 100:<{cell}}"[:cell], style=DEVICE_COLOURS[d % len(DEVICE_COLOURS)])
    return text


def map_line(row: dict, num_devices: int) -> Text:
    """An op's line of the strategy map (``row`` as ``strategy_rows`` gives it): its name,
    a cell per device (filled where the op has a task), and its degrees."""
    cell = map_cell_width(num_devices)
    text = Text(f"{row['op'][:NAME_WIDTH]:<{NAME_WIDTH}} ")
    used = set(row["devices"])
    for d in range(num_devices):
        if d in used:
            text.append("█" * cell, style=DEVICE_COLOURS[d % len(DEVICE_COLOURS)])
        else:
            text.append("·" + " " * (cell - 1), style="dim")
    text.append(f" {split_text(row)}", style="dim")
    return text


class StrategyMap(ScrollView):
    """The map, drawn a line at a time: only the lines on screen are ever built, so a
    new best strategy costs the same on Inception's 300 ops as on LeNet's 15."""

    DEFAULT_CSS = "StrategyMap { height: 1fr; }"
    EMPTY = Text("no strategy yet", style="dim italic")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[dict] = []
        self._num_devices = 0
        self._strips: dict[int, Strip] = {}   # line -> its drawing, until the next show

    def show(self, strategy: Strategy | None, graph: OpGraph, num_devices: int) -> None:
        self._rows = strategy_rows(strategy, graph) if strategy is not None else []
        self._num_devices = num_devices
        self._strips.clear()
        degrees = max((len(split_text(row)) for row in self._rows), default=0)
        width = NAME_WIDTH + 2 + map_cell_width(num_devices) * num_devices + degrees
        self.virtual_size = Size(width if self._rows else self.EMPTY.cell_len,
                                 len(self._rows) + 1)
        self.refresh()

    def _line(self, index: int) -> Text:
        """Line ``index`` of the map: the header, an op's line, or nothing below them."""
        if index == 0:
            return map_header(self._num_devices) if self._rows else self.EMPTY
        if index <= len(self._rows):
            return map_line(self._rows[index - 1], self._num_devices)
        return Text()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        if index not in self._strips:
            line = self._line(index)
            self._strips[index] = Strip(list(line.render(self.app.console)), line.cell_len)
        return self._strips[index].crop_extend(scroll_x, scroll_x + self.size.width,
                                               self.rich_style)
