"""Per-device bars: how busy each device is over the iteration, and its memory against
its capacity. A device over capacity gets a bar of ``!`` and the excess in words, so
it reads without colour too."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from flextui.machine.units import format_bytes
from flextui.session.gantt import short_names
from flextui.sim.timeline import DeviceStats, Timeline

EIGHTHS = " ▏▎▍▌▋▊▉"
EMPTY = "·"
OVER = "!"
TEXT_WIDTH = 10  # "1023.9 MiB", "+1.2 GiB!"


def bar(fraction: float, width: int) -> str:
    """``width`` cells, ``fraction`` (clamped to 0..1) of them filled, to an eighth."""
    eighths = round(min(max(fraction, 0.0), 1.0) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + EIGHTHS[rest].strip()).ljust(width, EMPTY)


class UsageBars(Widget):
    """A header and a line per device: name, busy bar and %, memory bar and bytes."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "usage--header", "usage--busy", "usage--memory", "usage--over",
    }
    DEFAULT_CSS = """
    UsageBars {
        height: auto;
        text-wrap: nowrap;
        text-overflow: clip;
    }

    UsageBars > .usage--header { color: $text-muted; }
    UsageBars > .usage--busy { color: $primary; }
    UsageBars > .usage--memory { color: $success; }
    UsageBars > .usage--over { color: $error; text-style: bold; }
    """

    def __init__(self, timeline: Timeline, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.timeline = timeline

    def show(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.timeline.devices) + 1

    def render(self) -> Text:
        devices = self.timeline.devices
        names = short_names([d.name for d in devices])
        name_width = max((len(n) for n in names), default=0)
        bars = max(self.size.width - name_width - TEXT_WIDTH - 8, 2)
        busy_width, memory_width = bars // 2, bars - bars // 2
        text = Text(no_wrap=True, overflow="crop")
        text.append(self._header(name_width, busy_width),
                    self.get_component_rich_style("usage--header"))
        for name, device in zip(names, devices):
            text.append(f"\n{name:<{name_width}} ")
            self._append_device(text, device, busy_width, memory_width)
        return text

    def _header(self, name_width: int, busy_width: int) -> str:
        """Column names, and the devices' capacity where they share one and it fits."""
        header = f"{'':<{name_width}} {'busy':<{busy_width + 5}} memory"
        capacities = {d.memory.capacity for d in self.timeline.devices}
        of = f" of {format_bytes(capacities.pop())}" if len(capacities) == 1 else ""
        return header + of if len(header + of) <= self.size.width else header

    def _append_device(self, text: Text, device: DeviceStats, busy_width: int,
                       memory_width: int) -> None:
        makespan = self.timeline.makespan
        busy = device.busy_s / makespan if makespan > 0 else 0.0
        text.append(bar(busy, busy_width), self.get_component_rich_style("usage--busy"))
        text.append(f" {busy:>4.0%} ")
        memory = device.memory
        if memory.over:
            style = self.get_component_rich_style("usage--over")
            text.append(OVER * memory_width, style)
            text.append(f" +{format_bytes(memory.over)}{OVER}", style)
            return
        fraction = memory.total / memory.capacity if memory.capacity else 0.0
        text.append(bar(fraction, memory_width), self.get_component_rich_style("usage--memory"))
        text.append(f" {format_bytes(memory.total)}")
