"""The Setup screen's summary panel: the chosen model (ops, parameters, FLOPs), the
chosen cluster (devices, memory, peak, aggregate bandwidths) and the search options
(budget, memory, the optimizer and precision trained in, the pipeline).

Each part is plain data from the core (:func:`~flextui.graph.summary.graph_summary`,
:func:`~flextui.machine.summary.cluster_summary`, SearchOptions) or a short note
("loading…", "see the error"); the panel only lays them out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from flextui.machine.units import format_bytes
from flextui.search.options import SearchOptions
from flextui.strategy.pipeline import Pipeline

Part = dict[str, Any] | str  # the data to show, or a note in its place


def scaled(value: float, unit: str = "") -> str:
    """``38_000_000`` -> ``"38.0 M"``; ``4.2e12, "FLOP"`` -> ``"4.2 TFLOP"``."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def _grid(rows: list[tuple[str, str]]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=10)
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, Text(value))   # names from files, never markup
    return grid


def model_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    batch = f"{s['batch_size']:,}"
    if "batch_devices" in s:
        batch += f" ({s['batch_size'] // s['batch_devices']:,} × {s['batch_devices']:,} devices)"
    return [("batch", batch), ("ops", str(s["ops"])),
            ("parameters", f"{scaled(s['parameters'])} ({format_bytes(s['parameter_bytes'])})"),
            ("FLOPs fwd", scaled(s["forward_flops"], "FLOP")),
            ("FLOPs bwd", scaled(s["backward_flops"], "FLOP"))]


def cluster_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    kinds = ", ".join(f"{n} × {k}" for k, n in s["device_kinds"].items())
    memory = ", ".join(format_bytes(v["memory_bytes"]) for v in s["device_specs"].values())
    rows = [("devices", f"{kinds} on {s['nodes']} node{'s' if s['nodes'] != 1 else ''}"),
            ("memory", f"{memory} each"),
            ("peak fp32", scaled(s["total_peak_flops_float32"], "FLOP/s")),
            ("intra-node", _bandwidth(s["intra_node_bandwidth"], s["intra_node_link_kinds"]))]
    if s["nodes"] > 1:
        rows.append(("inter-node", _bandwidth(s["inter_node_bandwidth"],
                                              s["inter_node_link_kinds"])))
    return rows


def _bandwidth(total: float, kinds: list[str]) -> str:
    if not total:
        return "none (one device)" if not kinds else "-"
    return f"{total / 1e9:,.0f} GB/s ({', '.join(kinds)})"


def options_rows(o: SearchOptions) -> list[tuple[str, str]]:
    budget = f"{o.iterations:,} steps" if o.iterations else f"{o.time_limit:g} s"
    memory = o.memory + (f", ≤ {format_bytes(o.memory_budget)}" if o.memory_budget else "")
    return [("budget", budget + (" or converged" if o.converge else "")),
            ("β", "auto" if o.beta is None else f"{o.beta:g}"),
            ("workers", str(o.chains)), ("memory", memory), ("seed", str(o.seed)),
            ("training", f"{o.optimizer}, {o.precision}" if o.training else "inference"),
            ("pipeline", _pipeline_text(o))]


def _pipeline_text(o: SearchOptions) -> str:
    """The pipeline every chain starts in, and whether moves may change it."""
    start = Pipeline(o.microbatches, o.schedule)
    moves = o.training and o.pipeline > 0
    if start.on:
        return start.describe() + (", moves may change it" if moves else "")
    return "moves may pipeline" if moves else "none"


class SetupSummary(Static):
    """The summary panel; set a part with :meth:`show` and it redraws."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.parts: dict[str, tuple[str, Part | SearchOptions]] = {
            "model": ("Model", "loading…"), "cluster": ("Cluster", "loading…"),
            "options": ("Search", "-")}

    def show(self, part: str, title: str, data: Part | SearchOptions) -> None:
        """Show ``data`` (summary data, SearchOptions or a note) as ``part``: "model",
        "cluster" or "options"."""
        self.parts[part] = (title, data)
        self.update(self._render_parts())

    def on_mount(self) -> None:
        self.update(self._render_parts())

    def _render_parts(self) -> Group:
        blocks: list[Any] = []
        rows_for: dict[str, Callable[[Any], list[tuple[str, str]]]] = {
            "model": model_rows, "cluster": cluster_rows, "options": options_rows}
        for part, (title, data) in self.parts.items():
            if blocks:
                blocks.append(Text())
            blocks.append(Text(title, style="bold"))
            if isinstance(data, str):
                blocks.append(Text(data, style="italic"))
                continue
            if part == "model" and isinstance(data, dict) and data.get("description"):
                blocks.append(Text(data["description"], style="dim"))
            blocks.append(_grid(rows_for[part](data)))
        return Group(*blocks)
