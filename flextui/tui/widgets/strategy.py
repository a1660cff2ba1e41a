"""The best strategy, two ways: a table (op, type, parallelism, degrees per dim,
devices) and a strategy map in the spirit of the FlexFlow paper's Figures 12-13 (a
row per op, a column per device, a device's cells in its own colour)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable, Static

from flextui.graph import OpGraph
from flextui.strategy import Strategy
from flextui.strategy.summary import device_list, strategy_rows

# one colour per device, cycling; the column still tells devices apart without colour
DEVICE_COLOURS = ("red", "green", "yellow", "blue", "magenta", "cyan", "bright_red",
                  "bright_green", "bright_yellow", "bright_blue", "bright_magenta",
                  "bright_cyan", "orange3", "purple", "chartreuse3", "deep_pink3")
NAME_WIDTH = 18


def degrees_text(degrees: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in degrees.items()) or "1"


class StrategyTable(DataTable):
    """One row per op; ops split beyond the sample dim are shown in bold."""

    COLUMNS = ("op", "type", "parallelism", "degrees", "devices")

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_columns(*self.COLUMNS)

    def show(self, strategy: Strategy | None, graph: OpGraph) -> None:
        self.clear()
        if strategy is None:
            return
        for row in strategy_rows(strategy, graph):
            style = "bold" if row["parallelism"] not in ("sample", "single") else ""
            self.add_row(Text(row["op"], style=style), row["type"], row["parallelism"],
                         degrees_text(row["degrees"]), device_list(row["devices"]),
                         key=row["op"])


def strategy_map(strategy: Strategy, graph: OpGraph, num_devices: int) -> Text:
    """The map as text: a header of device numbers, then per op its name, a cell per
    device (filled where the op has a task), and its degrees."""
    cell = 2 if num_devices <= 24 else 1
    text = Text(" " * (NAME_WIDTH + 1), style="dim")
    for d in range(num_devices):
        text.append(f"{d % 100:<{cell}}"[:cell], style=DEVICE_COLOURS[d % len(DEVICE_COLOURS)])
    text.append("\n")
    for row in strategy_rows(strategy, graph):
        text.append(f"{row['op'][:NAME_WIDTH]:<{NAME_WIDTH}} ")
        used = set(row["devices"])
        for d in range(num_devices):
            if d in used:
                text.append("█" * cell, style=DEVICE_COLOURS[d % len(DEVICE_COLOURS)])
            else:
                text.append("·" + " " * (cell - 1), style="dim")
        text.append(f" {degrees_text(row['degrees'])}\n", style="dim")
    text.rstrip()
    return text


class StrategyMap(Static):
    def show(self, strategy: Strategy | None, graph: OpGraph, num_devices: int) -> None:
        self.update(strategy_map(strategy, graph, num_devices) if strategy is not None
                    else Text("no strategy yet", style="dim italic"))
