"""The Launch screen's devices: one line each, with its samples/s and their recent
history as a sparkline, step time, how the step splits into compute and waiting on
communication, memory against capacity, GPU utilisation, and its busy time against
the simulated (a device off by more than a quarter is highlighted; on a wide terminal
the two times beside the error). However many devices, each is reachable: the rows
scroll under the header."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from flextui.runtime.summary import DeviceRow
from flextui.tui.widgets.usage import bar

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 12
SPLIT_WIDTH = 10
#: from this many columns on, busy and simulated times are shown beside their error,
#: and the history is longer
WIDE = 104
WIDE_SPARK_WIDTH = 24


def sparkline(values: tuple[float, ...], width: int = SPARK_WIDTH) -> str:
    """The last ``width`` values as bars from their least to their most."""
    shown = values[-width:]
    if not shown:
        return "·" * width
    low, high = min(shown), max(shown)
    span = high - low
    marks = "".join(SPARKS[int((v - low) / span * (len(SPARKS) - 1)) if span else 3]
                    for v in shown)
    return marks.rjust(width, " ")


def split(compute: float, wait: float, styles: tuple[Style, Style, Style] | None = None,
          width: int = SPLIT_WIDTH) -> Text:
    """A bar of the step: compute (█), waiting on communication (▒), the rest (·), in
    ``styles`` (compute, wait, rest)."""
    c = round(min(max(compute, 0.0), 1.0) * width)
    w = round(min(max(wait, 0.0), 1.0 - c / width) * width)
    plain = Style()
    compute_style, wait_style, rest_style = styles or (plain, plain, plain)
    return Text.assemble(("█" * c, compute_style), ("▒" * w, wait_style),
                         ("·" * (width - c - w), rest_style))


class DeviceTable(Vertical):
    """The header stays put; the devices scroll under it (focus the list, or wheel over
    it) once there are more than the screen shows."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "devices--header", "devices--compute", "devices--wait", "devices--idle",
        "devices--deviates",
    }
    DEFAULT_CSS = """
    DeviceTable {
        height: auto;
    }

    DeviceTable Static {
        height: auto;
        text-wrap: nowrap;
        text-overflow: clip;
    }

    DeviceTable > VerticalScroll {
        height: auto;
        max-height: 40vh;
        scrollbar-size-vertical: 1;
    }

    DeviceTable > .devices--header { color: $text-muted; }
    DeviceTable > .devices--compute { color: $primary; }
    DeviceTable > .devices--wait { color: $warning; }
    DeviceTable > .devices--idle { color: $text-muted; }
    DeviceTable > .devices--deviates { color: $error; text-style: bold; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="devices-header")
        with VerticalScroll(id="devices-list"):
            yield Static(id="devices-rows")

    def show(self, devices: list[DeviceRow], histories: list[tuple[float, ...]]) -> None:
        styles = {name: self.get_component_rich_style(f"devices--{name}")
                  for name in ("header", "compute", "wait", "idle", "deviates")}
        wide = self.size.width >= WIDE
        headers = ("device", "samples/s", "history", "step ms", "compute▒wait", "memory",
                   "GPU", *(("busy ms", "sim ms", "error") if wide else ("busy/sim",)))
        rows: list[tuple[str | Text, ...]] = []
        for d, history in zip(devices, histories):
            used = d.peak_memory / d.memory_capacity if d.memory_capacity else 0.0
            error = d.busy_error
            shares = split(d.compute_share, d.wait_share,
                           (styles["compute"], styles["wait"], styles["idle"]))
            busy = (f"{d.busy_s * 1e3:,.2f}", "n/a" if d.simulated_busy_s is None
                    else f"{d.simulated_busy_s * 1e3:,.2f}") if wide else ()
            rows.append((
                Text(d.name), f"{d.samples_per_s:,.0f}",
                sparkline(history, WIDE_SPARK_WIDTH if wide else SPARK_WIDTH),
                f"{d.step_s * 1e3:,.2f}", shares,
                f"{d.peak_memory / 2**20:,.0f}M {bar(used, 4)}",
                "n/a" if d.gpu_util is None else f"{d.gpu_util:.0f}%", *busy,
                Text("n/a" if error is None else f"{error:+.0%}",
                     style=styles["deviates"] if d.deviates else "")))
        header = tuple(Text(h, style=styles["header"]) for h in headers)
        widths = [max(cell_len(str(cell)) for cell in column)
                  for column in zip(header, *rows)]
        self.query_one("#devices-header", Static).update(_grid(widths, [header]))
        self.query_one("#devices-rows", Static).update(_grid(widths, rows))


def _grid(widths: list[int], rows: list[tuple[str | Text, ...]]) -> Table:
    """``rows`` in columns of ``widths`` (the header's grid and the rows' line up)."""
    table = Table.grid(padding=(0, 1))
    for i, width in enumerate(widths):
        table.add_column(justify="left" if i in (0, 2, 4) else "right", no_wrap=True,
                         width=width)
    for row in rows:
        table.add_row(*row)
    return table
