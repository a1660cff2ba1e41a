"""The time/memory frontier against a brute-force Pareto filter."""

import math
import random

import pytest

from flextui.search.frontier import Frontier, Point


def pareto(points):
    """Brute force: the (time, memory) pairs no other point weakly dominates, where
    among equal pairs only the first offered counts."""
    keep = []
    for i, (t, m, _) in enumerate(points):
        dominated = any((t2 <= t and m2 <= m) and ((t2, m2) != (t, m) or j < i)
                        for j, (t2, m2, _) in enumerate(points) if j != i)
        if not dominated:
            keep.append((t, m))
    return sorted(keep, key=lambda p: p[1])


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 5, 50, 300])
    grid = rng.choice([None, 10])  # a coarse grid makes many ties
    points = []
    for k in range(n):
        if grid:
            t, m = float(rng.randrange(grid)), rng.randrange(grid)
        else:
            t, m = rng.random(), rng.randrange(10**9)
        points.append((t, m, k))
    f = Frontier()
    for p in points:
        f.add(*p)
    got = [(p.time, p.memory) for p in f.points]
    assert got == pareto(points)
    assert len(f) == len(got)
    # sorted by memory ascending, time strictly descending
    assert all(a.memory < b.memory and a.time > b.time for a, b in zip(f.points, f.points[1:]))
    # the first point offered with each kept pair is the one kept
    first = {}
    for t, m, k in points:
        first.setdefault((t, m), k)
    assert all(p.item == first[(p.time, p.memory)] for p in f.points)


def test_add_reports_membership():
    f = Frontier()
    assert f.add(10.0, 100, "a")
    assert not f.add(10.0, 100, "same")      # equal in both: not added
    assert not f.add(11.0, 100, "slower")    # dominated
    assert not f.add(10.0, 200, "bigger")    # dominated
    assert f.add(5.0, 200, "b")              # faster, bigger: a trade-off
    assert f.add(20.0, 50, "c")
    assert [p.item for p in f.points] == ["c", "a", "b"]
    assert f.add(4.0, 50, "d")               # dominates everything
    assert [(p.time, p.memory, p.item) for p in f.points] == [(4.0, 50, "d")]


def test_equal_memory_faster_replaces():
    f = Frontier([(10.0, 100, "a"), (5.0, 300, "b")])
    assert f.add(8.0, 100, "a2")
    assert [p.item for p in f.points] == ["a2", "b"]
    assert f.add(5.0, 200, "b2")             # equal time, smaller memory
    assert [p.item for p in f.points] == ["a2", "b2"]


def test_add_returns_whether_on_frontier_now():
    f = Frontier()
    for k in range(200):
        t, m = random.Random(k).random(), random.Random(-k).randrange(1000)
        on = f.add(t, m, k)
        assert on == any(p.item == k for p in f.points)


def test_fastest_within():
    f = Frontier()
    assert f.fastest_within(10**12) is None
    assert f.fastest() is None and f.smallest() is None
    f.add(30.0, 100, "small")
    f.add(20.0, 200, "mid")
    f.add(10.0, 400, "big")
    assert f.fastest_within(99) is None
    assert f.fastest_within(100).item == "small"     # the budget is inclusive
    assert f.fastest_within(199).item == "small"
    assert f.fastest_within(200).item == "mid"
    assert f.fastest_within(399.5).item == "mid"
    assert f.fastest_within(10**15).item == "big"
    assert f.fastest_within(math.inf).item == "big"
    assert f.fastest().item == "big" and f.smallest().item == "small"
    assert f.fastest_within(200) == Point(20.0, 200, "mid")


def test_infinite_times_and_nan():
    f = Frontier()
    assert f.add(math.inf, 10, "rejected")
    assert f.add(1.0, 10, "ok")
    assert [p.item for p in f.points] == ["ok"]
    with pytest.raises(ValueError):
        f.add(math.nan, 1)


@pytest.mark.parametrize("seed", range(5))
def test_merge_equals_frontier_of_union(seed):
    rng = random.Random(seed)
    a_pts = [(rng.random(), rng.randrange(1000), ("a", k)) for k in range(200)]
    b_pts = [(rng.random(), rng.randrange(1000), ("b", k)) for k in range(200)]
    a, b = Frontier(a_pts), Frontier(b_pts)
    b_before = [(p.time, p.memory) for p in b.points]
    n = a.merge(b)
    union = Frontier(a_pts + b_pts)
    assert [(p.time, p.memory) for p in a.points] == [(p.time, p.memory) for p in union.points]
    assert n == sum(1 for p in a.points if p.item[0] == "b")
    assert [(p.time, p.memory) for p in b.points] == b_before  # the other is untouched


def test_merge_plain_points_and_self():
    f = Frontier([(3.0, 1, "x")])
    assert f.merge([(2.0, 2, "y"), Point(1.0, 3, "z"), (5.0, 5, "dominated")]) == 2
    assert [p.item for p in f.points] == ["x", "y", "z"]
    assert f.merge(f) == 0
    assert len(f) == 3
    assert [p.item for p in f] == ["x", "y", "z"]
