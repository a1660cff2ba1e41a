"""A braille canvas: each terminal cell holds 2x4 dots, so a 40x10 panel plots 80x40
points. Series are drawn in layers; a cell shows the style of the topmost layer that
has a dot in it. Plain Python (Rich text out), so plots are tested without an app.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

BRAILLE = 0x2800
# bit of the dot at (x, y) within a cell, x in 0..1, y in 0..3 (top down)
DOT = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


@dataclass(frozen=True)
class Scale:
    """Maps data values in [lo, hi] onto dots 0..dots-1 (higher values higher up when
    ``flip``)."""

    lo: float
    hi: float
    dots: int
    flip: bool = False

    def __call__(self, value: float) -> int | None:
        if not math.isfinite(value) or value < self.lo or value > self.hi:
            return None
        span = self.hi - self.lo
        pos = 0 if span <= 0 else round((value - self.lo) / span * (self.dots - 1))
        return self.dots - 1 - pos if self.flip else pos


def padded_range(values: Sequence[float], pad: float = 0.05) -> tuple[float, float]:
    """The finite values' range, widened by ``pad`` of itself (or of the value, for a
    single value) so nothing sits on the border."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    margin = (hi - lo) * pad or abs(hi) * pad or 1.0
    return lo - margin, hi + margin


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = max(1, width), max(1, height)
        self._bits = [[0] * self.width for _ in range(self.height)]
        self._style: list[list[str | None]] = [[None] * self.width for _ in range(self.height)]

    @property
    def dots_x(self) -> int:
        return self.width * 2

    @property
    def dots_y(self) -> int:
        return self.height * 4

    def dot(self, x: int, y: int, style: str) -> None:
        if 0 <= x < self.dots_x and 0 <= y < self.dots_y:
            row, col = y // 4, x // 2
            self._bits[row][col] |= DOT[x % 2][y % 4]
            self._style[row][col] = style

    def line(self, x0: int, y0: int, x1: int, y1: int, style: str) -> None:
        """Dots along the segment (Bresenham)."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.dot(x0, y0, style)
            if (x0, y0) == (x1, y1):
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def series(self, xs: Sequence[float], ys: Sequence[float], sx: Scale, sy: Scale,
               style: str, *, connect: bool = False, steps: bool = False) -> None:
        """Plot points; ``connect`` joins neighbours with lines, ``steps`` with a
        horizontal then a vertical segment (for a running minimum)."""
        last = None
        for x, y in zip(xs, ys):
            px, py = sx(x), sy(y)
            if px is None or py is None:
                last = None
                continue
            if last is not None and (connect or steps):
                lx, ly = last
                if steps:
                    self.line(lx, ly, px, ly, style)
                    self.line(px, ly, px, py, style)
                else:
                    self.line(lx, ly, px, py, style)
            else:
                self.dot(px, py, style)
            last = (px, py)

    def rows(self) -> list[Text]:
        out = []
        for bits, styles in zip(self._bits, self._style):
            text = Text()
            for b, style in zip(bits, styles):
                text.append(chr(BRAILLE + b) if b else " ", style=style or "")
            out.append(text)
        return out
