"""What the Search screen plots, built from a ``SearchView``: best and current cost
against steps or time, and the time/memory frontier."""

from __future__ import annotations

from flextui.session.search_watch import SearchView
from flextui.tui.widgets.canvas import padded_range
from flextui.tui.widgets.chart import ChartData, Series

BEST_STYLE = "bold green"
CURRENT_STYLE = "cyan"
FRONTIER_STYLE = "bold magenta"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def cost_chart(view: SearchView, by_time: bool = False) -> ChartData:
    """The best cost as a falling step line over the current cost's dots; the y range
    follows the best and the bulk of the current costs (outliers are clipped)."""
    points = view.history
    xs = [p.elapsed if by_time else p.step for p in points]
    best = [p.best * 1e3 for p in points]
    current = [p.current * 1e3 for p in points]
    finite = sorted(c for c in current if c < float("inf"))
    bulk = finite[: max(1, int(len(finite) * 0.9))] if finite else []
    lo, hi = padded_range(best + bulk)
    x_hi = max(xs[-1] if xs else 1.0, 1e-9)
    x_format = (lambda v: f"{v:.1f}s") if by_time else (lambda v: f"{v:,.0f}")
    return ChartData(
        series=(Series("current", xs, current, CURRENT_STYLE, "dots", "⠂"),
                Series("best", xs, best, BEST_STYLE, "steps", "━")),
        x_range=(0.0, x_hi), y_range=(max(0.0, lo), hi), x_format=x_format,
        y_format=lambda v: f"{v:.4g}", x_title="time" if by_time else "steps",
        empty="waiting for the first steps")


def frontier_chart(view: SearchView) -> ChartData:
    """Peak per-device memory (MiB or GiB) against iteration time (ms) of the strategies
    on the time/memory frontier."""
    largest = max((m for _, m in view.frontier), default=0)
    unit, scale = ("GiB", 2**30) if largest >= 2**30 else ("MiB", 2**20)
    mem = [m / scale for _, m in view.frontier]
    time = [t * 1e3 for t, _ in view.frontier]
    return ChartData(
        series=(Series(f"frontier (memory {unit} → time ms)", mem, time, FRONTIER_STYLE,
                       "line", "•"),),
        x_range=padded_range(mem), y_range=padded_range(time),
        x_format=lambda v: f"{v:.3g} {unit}", y_format=lambda v: f"{v:.4g}",
        x_title="peak memory per device", empty="no strategies simulated yet")
