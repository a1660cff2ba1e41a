"""The braille canvas, the chart layout, the cost/frontier charts and the strategy map,
as plain text (no app needed); the strategy table and map in a small app."""

import math

from textual.app import App

from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.session.search_watch import HistoryPoint, SearchView
from flextui.strategy import builtin_strategy
from flextui.strategy.summary import strategy_rows
from flextui.tui.widgets import strategy as strategy_widgets
from flextui.tui.widgets.canvas import Canvas, Scale, padded_range
from flextui.tui.widgets.chart import ChartData, Series, chart_rows
from flextui.tui.widgets.search_charts import cost_chart, frontier_chart
from flextui.tui.widgets.strategy import StrategyMap, StrategyTable, map_header, map_line


def test_braille_dots_and_lines():
    c = Canvas(2, 1)                      # 4 x 4 dots
    c.dot(0, 0, "x")
    c.dot(3, 3, "y")
    assert [r.plain for r in c.rows()] == [chr(0x2801) + chr(0x2880)]
    c = Canvas(2, 1)
    c.line(0, 3, 3, 3, "x")               # the bottom row of dots across both cells
    assert [r.plain for r in c.rows()] == [chr(0x28C0) * 2]
    c.dot(99, 99, "x")                    # off the canvas: ignored
    assert c.rows()[0].plain == chr(0x28C0) * 2


def test_scale_maps_ends_and_rejects_outside():
    s = Scale(0.0, 10.0, 11)
    assert (s(0.0), s(5.0), s(10.0), s(11.0), s(math.inf)) == (0, 5, 10, None, None)
    flipped = Scale(0.0, 10.0, 11, flip=True)
    assert (flipped(0.0), flipped(10.0)) == (10, 0)
    assert padded_range([2.0, 4.0]) == (1.9, 4.1)
    assert padded_range([]) == (0.0, 1.0)


def test_chart_rows_have_the_size_asked_for_and_the_labels():
    data = ChartData(series=(Series("best", [0, 1, 2], [3.0, 2.0, 1.0], "green", "steps", "━"),),
                     x_range=(0, 2), y_range=(1.0, 3.0), y_format=lambda v: f"{v:.1f}")
    rows = chart_rows(data, 40, 8)
    assert len(rows) == 8 and all(len(r.plain) <= 40 for r in rows)
    assert rows[0].plain.lstrip().startswith("3.0 ┤") and "1.0 ┤" in rows[5].plain
    assert rows[-1].plain.strip() == "━ best"
    assert any(ch != " " for ch in rows[0].plain[9:])   # the first point is at the top


def view_with(history, frontier=()):
    return SearchView("running", len(history), 1.0, 0.5, 2e-3, 1e-3, 1.5e-3, 0.5, 100.0,
                      tuple(history), None, None, 0, tuple(frontier))


def test_cost_chart_plots_best_and_current_in_ms():
    history = [HistoryPoint(i, i / 10, 2e-3 - i * 1e-5, 2.5e-3) for i in range(1, 51)]
    data = cost_chart(view_with(history))
    current, best = data.series
    assert best.ys[0] == 2e-3 * 1e3 - 0.01 and best.mode == "steps"
    assert data.x_range == (0.0, 50) and data.y_range[0] < min(best.ys)
    timed = cost_chart(view_with(history), by_time=True)
    assert timed.series[0].xs[-1] == 5.0 and timed.x_title == "time"
    empty = chart_rows(cost_chart(view_with([])), 40, 8)
    assert any("waiting for the first steps" in r.plain for r in empty)


def test_frontier_chart_in_mib_or_gib_and_ms():
    data = frontier_chart(view_with([], [(2e-3, 2**30), (1e-3, 2**31)]))
    (series,) = data.series
    assert list(series.xs) == [1.0, 2.0] and list(series.ys) == [2.0, 1.0]
    small = frontier_chart(view_with([], [(2e-3, 2**20), (1e-3, 3 * 2**20)]))
    assert list(small.series[0].xs) == [1.0, 3.0] and small.x_format(1.0) == "1 MiB"


def strategy_map(strategy, graph, num_devices):
    """The map's lines, as text."""
    rows = strategy_rows(strategy, graph)
    return [map_header(num_devices).plain] + [map_line(r, num_devices).plain for r in rows]


def test_strategy_map_marks_each_ops_devices():
    graph, cluster = load_model("lenet"), load_named_cluster("p100-4x4", nodes=1)
    lines = strategy_map(builtin_strategy("data-parallel", graph, cluster), graph, 4)
    assert lines[0].split() == ["0", "1", "2", "3"]
    conv = next(line for line in lines if line.startswith("conv1"))
    assert conv.count("██") == 4
    expert = strategy_map(builtin_strategy("model-parallel", graph, cluster), graph, 4)
    assert all(line.count("██") == 1 for line in expert[1:])
    dp = builtin_strategy("data-parallel", graph, cluster)
    lines = strategy_map(dp.replace("conv1", dp["conv1"].with_recompute(True)), graph, 4)
    assert next(line for line in lines if line.startswith("conv1")).endswith(
        "sample=4 recompute")
    assert not next(line for line in lines if line.startswith("conv2")).endswith("recompute")


# -- the strategy widgets, in a small app: a new best costs little on a large model -------

class StrategyHost(App):
    """A strategy table and map, 80 columns wide, the map 10 lines high."""

    def compose(self):
        yield StrategyTable(id="table")
        yield StrategyMap(id="map")

    def on_mount(self):
        self.query_one(StrategyMap).styles.height = 10


def a_new_best(strategy, graph, cluster, op_index=5):
    """``strategy`` with one op (a conv of Inception's) given the expert strategy's
    config."""
    op = graph.ops[op_index]
    return strategy.replace(op.name, builtin_strategy("model-parallel", graph, cluster)[op.name])


async def test_a_new_best_rewrites_only_its_changed_rows_and_the_cursor_stays():
    graph, cluster = load_model("inception_v3"), load_named_cluster("p100-4x4", nodes=4)
    first = builtin_strategy("data-parallel", graph, cluster)
    app = StrategyHost()
    async with app.run_test(size=(80, 30)) as pilot:
        table = app.query_one(StrategyTable)
        table.show(first, graph)
        await pilot.pause()
        table.move_cursor(row=40)
        better = a_new_best(first, graph, cluster)
        table.show(better, graph)
        await pilot.pause()
        assert table.cursor_row == 40 and table.row_count == len(graph.ops)
        rows = strategy_rows(better, graph)
        assert [str(table.get_row_at(i)[0]) for i in range(len(rows))] == [r["op"] for r in rows]
        assert table.get_row(rows[5]["op"])[-1] != table.get_row(rows[4]["op"])[-1]


async def test_the_map_draws_only_the_lines_on_screen(monkeypatch):
    graph, cluster = load_model("inception_v3"), load_named_cluster("p100-4x4", nodes=4)
    drawn = []
    monkeypatch.setattr(strategy_widgets, "map_line",
                        lambda row, n: drawn.append(row["op"]) or map_line(row, n))
    app = StrategyHost()
    async with app.run_test(size=(80, 30)) as pilot:
        strategy_map_widget = app.query_one(StrategyMap)
        strategy_map_widget.show(builtin_strategy("data-parallel", graph, cluster), graph, 16)
        await pilot.pause()
        assert 0 < len(drawn) < 10                  # not Inception's 328 ops
        strategy_map_widget.scroll_to(y=100, animate=False)
        await pilot.pause()
        assert graph.ops[99].name in drawn and len(drawn) < 20
