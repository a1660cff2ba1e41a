"""Rectangular regions of a tensor: one half-open ``(start, stop)`` range per dim."""

from __future__ import annotations

import math

Region = tuple[tuple[int, int], ...]


def full_region(shape: tuple[int, ...]) -> Region:
    return tuple((0, size) for size in shape)


def region_shape(region: Region) -> tuple[int, ...]:
    return tuple(stop - start for start, stop in region)


def region_volume(region: Region) -> int:
    return math.prod(stop - start for start, stop in region)


def intersect(a: Region, b: Region) -> Region | None:
    """The overlap of two regions of the same tensor, or None when they are disjoint."""
    out = []
    for (a0, a1), (b0, b1) in zip(a, b, strict=True):
        lo, hi = max(a0, b0), min(a1, b1)
        if lo >= hi:
            return None
        out.append((lo, hi))
    return tuple(out)


def within(region: Region, box: Region) -> tuple[slice, ...]:
    """The slices of a tensor holding ``box`` that select ``region`` (inside it)."""
    return tuple(slice(r0 - b0, r1 - b0) for (r0, r1), (b0, _) in zip(region, box))
