"""The Timeline screen, driven with Textual's Pilot in a tiny host app."""

import dataclasses
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Static

import flextui
from flextui.cost import AnalyticCostModel
from flextui.machine import load_named_cluster
from flextui.machine.units import format_bytes
from flextui.session.gantt import KIND_GLYPHS, SELECTED_GLYPH, task_details
from flextui.sim import Simulator, TaskKind
from flextui.strategy import builtin_strategy
from flextui.strategy.pipeline import Pipeline, Schedule
from flextui.tui.screens.timeline import TimelineScreen
from flextui.tui.widgets.gantt import Gantt
from flextui.tui.widgets.usage import UsageBars, bar
from helpers import model

CSS = Path(flextui.__file__).parent / "tui" / "app.tcss"
GRAPH = model("lenet")
CLUSTER = load_named_cluster("p100-4x4", nodes=1)
SIM = Simulator(GRAPH, CLUSTER, AnalyticCostModel())
MODEL_PARALLEL = builtin_strategy("model-parallel", GRAPH, CLUSTER)
DATA_PARALLEL = builtin_strategy("data-parallel", GRAPH, CLUSTER)
MP_TIMELINE, DP_TIMELINE = SIM.simulate(MODEL_PARALLEL), SIM.simulate(DATA_PARALLEL)


class Host(App):
    CSS_PATH = str(CSS)

    def __init__(self, compare: bool = True) -> None:
        super().__init__()
        self.compare = compare

    def on_mount(self) -> None:
        compare = ("data parallel", DP_TIMELINE, DATA_PARALLEL) if self.compare else None
        self.push_screen(TimelineScreen(MP_TIMELINE, GRAPH, "lenet", MODEL_PARALLEL, compare))


def details(app: App) -> tuple[str, str]:
    """The details panel's title and text."""
    panel = app.screen.query_one("#timeline-details")
    text = app.screen.query_one("#timeline-task", Static).content
    lines = app.console.render_lines(text, app.console.options.update_width(60), pad=False)
    return str(panel.border_title), "\n".join("".join(s.text for s in line) for line in lines)


async def test_selecting_tasks_shows_their_details():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gantt = app.screen.query_one(Gantt)
        assert gantt.has_focus and gantt.lane.name == "n0.gpu0"
        first = gantt.selected
        assert first is gantt.lane.tasks[0]
        expected = task_details(first, GRAPH, MODEL_PARALLEL)
        title, text = details(app)
        assert title == expected.title and f"start {expected.rows[2][1]}" in text
        await pilot.press("tab", "tab")
        assert gantt.selected is gantt.lane.tasks[2]
        await pilot.press("shift+tab")
        assert gantt.selected is gantt.lane.tasks[1]
        await pilot.press("down", "j")
        await pilot.pause()
        assert gantt.lane.name == "n0.gpu2"
        title, text = details(app)
        assert title == task_details(gantt.selected, GRAPH, MODEL_PARALLEL).title
        assert "n0.gpu2" in text


async def test_zoom_and_scroll_move_the_window():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        gantt = app.screen.query_one(Gantt)
        whole = gantt.view
        assert (whole.t0, whole.t1) == (0.0, MP_TIMELINE.makespan)
        await pilot.press("plus")
        assert gantt.view.span == pytest.approx(whole.span / 2)
        await pilot.press("equals_sign")
        assert gantt.view.span == pytest.approx(whole.span / 4)
        await pilot.press("end")
        assert gantt.view.t1 == pytest.approx(whole.t1)
        await pilot.press("left", "h")
        assert gantt.view.t1 == pytest.approx(whole.t1 - gantt.view.span / 2)
        await pilot.press("home", "minus", "0")
        assert gantt.view == whole
        await pilot.pause()
        legend = app.screen.query_one("#timeline-legend", Static).render()
        assert str(legend).endswith("0.0000–0.3889 ms")


async def test_compare_flips_timelines_on_one_scale():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        gantt, usage = app.screen.query_one(Gantt), app.screen.query_one(UsageBars)
        await pilot.press("down")
        await pilot.press("c")
        await pilot.pause()
        title = str(app.screen.query_one("#timeline-title", Static).render())
        assert title.startswith("lenet · data parallel") and "vs model-parallel" in title
        assert usage.timeline is DP_TIMELINE
        assert gantt.view.limit == max(MP_TIMELINE.makespan, DP_TIMELINE.makespan)
        assert gantt.lane.name == "n0.gpu1"
        assert any(t.kind == TaskKind.SYNC for lane in gantt.lanes for t in lane.tasks)
        assert details(app)[0] == task_details(gantt.selected, GRAPH, DATA_PARALLEL).title
        await pilot.press("c")
        assert usage.timeline is MP_TIMELINE


async def test_without_compare_c_does_nothing_and_escape_goes_back():
    app = Host(compare=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        assert app.screen.query_one(UsageBars).timeline is MP_TIMELINE
        await pilot.press("escape")
        assert not isinstance(app.screen, TimelineScreen)


async def test_click_selects_the_task_under_the_pointer():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        gantt = app.screen.query_one(Gantt)
        lane = gantt.lanes[3]
        longest = max(lane.tasks, key=lambda t: t.end - t.start)
        column = gantt.view.cells(longest.start, longest.end, gantt.chart_width)
        await pilot.click(Gantt, offset=(gantt.label_width + column[len(column) // 2], 4))
        assert gantt.lane is lane and gantt.selected is longest


async def test_rows_use_a_glyph_per_kind():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        gantt = app.screen.query_one(Gantt)
        text = "".join(gantt.render_line(y).text for y in range(1, len(gantt.lanes) + 1))
        for kind in (TaskKind.FORWARD, TaskKind.BACKWARD, TaskKind.TRANSFER):
            assert KIND_GLYPHS[kind] in text
        assert text.count(SELECTED_GLYPH) == 1 and text.startswith("gpu0")


class UsageHost(App):
    def __init__(self, timeline) -> None:
        super().__init__()
        self.timeline = timeline

    def compose(self):
        yield UsageBars(self.timeline)


async def test_usage_shows_devices_over_capacity():
    small = dataclasses.replace(DP_TIMELINE.devices[1].memory, capacity=2**20)
    devices = list(DP_TIMELINE.devices)
    devices[1] = dataclasses.replace(devices[1], memory=small)
    timeline = dataclasses.replace(DP_TIMELINE, devices=devices)
    app = UsageHost(timeline)
    async with app.run_test(size=(60, 8)):
        lines = str(app.query_one(UsageBars).render()).splitlines()
        assert len(lines) == 5 and lines[0].split()[:2] == ["busy", "memory"]
        over = f"+{format_bytes(small.over)}!"
        assert lines[2].startswith("gpu1") and lines[2].endswith(over) and "!!!!" in lines[2]
        assert "!" not in lines[1] and lines[1].endswith(format_bytes(small.total))


def test_bars():
    assert bar(0.0, 4) == "····" and bar(1.0, 4) == "████" and bar(2.0, 2) == "██"
    assert bar(0.5, 3) == "█▌·"


def test_snapshot(snap_compare):
    assert snap_compare(Host(), press=["down", "tab"], terminal_size=(100, 30))


async def test_a_pipelines_timeline_numbers_each_micro_batch_and_its_tasks_say_which():
    """Model parallel LeNet in 4 micro-batches (1F1B): the first device's compute cells
    show micro-batches 0 to 3, its idle cells the bubble; a task's details name its
    micro-batch and give its block of that micro-batch's samples."""
    piped = MODEL_PARALLEL.with_pipeline(Pipeline(4, Schedule.ONE_F_ONE_B))
    timeline = SIM.simulate(piped)

    class Piped(App):
        CSS_PATH = str(CSS)

        def on_mount(self) -> None:
            self.push_screen(TimelineScreen(timeline, GRAPH, "lenet", piped, None))

    app = Piped()
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        gantt = app.screen.query_one(Gantt)
        row = "".join(s.text for s in gantt._row(0))
        chart = row[gantt.label_width:]
        assert {"0", "1", "2", "3"} <= set(chart)
        task = next(t for t in gantt.lane.tasks if t.kind == TaskKind.FORWARD and t.micro == 3)
        rows = dict(task_details(task, GRAPH, piped).rows)
        assert rows["micro-batch"] == "3 of 4 (1f1b)"
        assert rows["block"].startswith(f"{GRAPH.batch_size // 4}×")
