"""The Launch screen's devices: one line each, with its samples/s and their recent
history as a sparkline, step time, how the step splits into compute and waiting on
communication, memory against capacity, GPU utilisation, and its busy time against
the simulated (a device off by more than a quarter is highlighted; on a wide terminal
the two times beside the error)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
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


class DeviceTable(Static):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "devices--header", "devices--compute", "devices--wait", "devices--idle",
        "devices--deviates",
    }
    DEFAULT_CSS = """
    DeviceTable {
        height: auto;
        text-wrap: nowrap;
        text-overflow: clip;
    }

    DeviceTable > .devices--header { color: $text-muted; }
    DeviceTable > .devices--compute { color: $primary; }
    DeviceTable > .devices--wait { color: $warning; }
    DeviceTable > .devices--idle { color: $text-muted; }
    DeviceTable > .devices--deviates { color: $error; text-style: bold; }
    """

    def show(self, devices: list[DeviceRow], histories: list[tuple[float, ...]]) -> None:
        styles = {name: self.get_component_rich_style(f"devices--{name}")
                  for name in ("header", "compute", "wait", "idle", "deviates")}
        table = Table.grid(padding=(0, 1))
        wide = self.size.width >= WIDE
        headers = ("device", "samples/s", "history", "step ms", "compute▒wait", "memory",
                   "GPU", *(("busy ms", "sim ms", "error") if wide else ("busy/sim",)))
        for i, _ in enumerate(headers):
            table.add_column(justify="left" if i in (0, 2, 4) else "right", no_wrap=True)
        table.add_row(*(Text(h, style=styles["header"]) for h in headers))
        for d, history in zip(devices, histories):
            used = d.peak_memory / d.memory_capacity if d.memory_capacity else 0.0
            error = d.busy_error
            shares = split(d.compute_share, d.wait_share,
                           (styles["compute"], styles["wait"], styles["idle"]))
            busy = (f"{d.busy_s * 1e3:,.2f}", "n/a" if d.simulated_busy_s is None
                    else f"{d.simulated_busy_s * 1e3:,.2f}") if wide else ()
            table.add_row(
                Text(d.name), f"{d.samples_per_s:,.0f}",
                sparkline(history, WIDE_SPARK_WIDTH if wide else SPARK_WIDTH),
                f"{d.step_s * 1e3:,.2f}", shares,
                f"{d.peak_memory / 2**20:,.0f}M {bar(used, 4)}",
                "n/a" if d.gpu_util is None else f"{d.gpu_util:.0f}%", *busy,
                Text("n/a" if error is None else f"{error:+.0%}",
                     style=styles["deviates"] if d.deviates else ""))
        self.update(table)
