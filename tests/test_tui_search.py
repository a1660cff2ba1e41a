"""The app's Search screen driven with Textual's Pilot: a live search (what it shows is
what the search found; pause, stop, save, the timeline), a replayed log (it reaches the
log's final best), errors in dialogs, the key map, 80x24, and snapshots."""

import dataclasses
import multiprocessing
import os
import threading

import pytest

from flextui.cost import AnalyticCostModel
from flextui.search import SearchOptions, read_search_log
from flextui.search.summary import baseline_costs
from flextui.session.playback import Playback
from flextui.sim import Simulator
from flextui.strategy import load_strategy
from flextui.tui.app import FlextuiApp
from flextui.tui.screens.dialogs import ErrorDialog
from flextui.tui.screens.help import HelpScreen
from flextui.tui.screens.search import SearchScreen, SearchSetup
from flextui.tui.screens.setup import SetupScreen
from flextui.tui.widgets.chart import Chart
from flextui.tui.widgets.strategy import StrategyTable
from helpers import HANG_S, edit_log_header, lenet_node, start_lenet_search, wait_for


async def test_live_search_shows_what_the_search_found(tmp_path):
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        start_lenet_search(app, SearchOptions(iterations=600, seed=1, converge=False))
        live = app.searches[0]
        await wait_for(pilot, lambda: live.done)
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await wait_for(pilot, lambda: screen.view.state == "finished")   # the next redraw
        result = live.result
        assert screen.view.best_cost == result.best_cost and screen.view.steps == 600
        plot = screen.query_one("#cost-plot", Chart).data
        assert plot.series[1].ys[-1] == result.best_cost * 1e3      # the best line ends there
        table = screen.query_one(StrategyTable)
        graph, cluster = lenet_node()
        assert table.row_count == len(graph.ops)
        for op in graph.ops:
            devices = table.get_row(op.name)[-1]
            assert devices.split(",")[0].split("-")[0] == str(result.best[op.name].devices[0])
        await pilot.press("s")
        await wait_for(pilot, lambda: any(tmp_path.glob("*.best.json")))
        saved = load_strategy(next(tmp_path.glob("*.best.json")), graph, cluster)
        assert Simulator(graph, cluster, AnalyticCostModel()).simulate(saved).cost == \
            pytest.approx(result.best_cost, rel=1e-12)
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TimelineScreen")
        assert app.screen.showing.timeline.cost == pytest.approx(result.best_cost, rel=1e-12)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
    log = read_search_log(next(tmp_path.glob("*.ffsearch")))
    assert log.final.best_cost == result.best_cost


async def test_pause_stop_and_quit_keep_the_log(tmp_path):
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        start_lenet_search(app, SearchOptions(time_limit=120, seed=2, converge=False))
        live = app.searches[0]
        await wait_for(pilot, lambda: live.view().steps > 0)
        await pilot.press("space")
        await wait_for(pilot, lambda: live.view().state == "paused")   # once its chain waits
        await pilot.press("space")
        assert live.view().state == "running"
        await pilot.press("x")
        await wait_for(pilot, lambda: live.done)
        assert live.view().reason == "interrupted"
        await pilot.press("ctrl+q")
    log = read_search_log(next(tmp_path.glob("*.ffsearch")))
    assert log.final is not None and log.final.reason == "interrupted"


@pytest.mark.parametrize("key", ["ctrl+q", None], ids=["ctrl+q", "the app ended otherwise"])
async def test_quitting_during_a_search_finishes_its_log(tmp_path, key):
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test() as pilot:
        start_lenet_search(app, SearchOptions(time_limit=120, seed=3, converge=False))
        await wait_for(pilot, lambda: app.searches[0].view().steps > 0)
        if key:
            await pilot.press(key)
    assert read_search_log(next(tmp_path.glob("*.ffsearch"))).final is not None


async def test_replay_plays_back_to_the_final_best(lenet_log):
    app = FlextuiApp(replay=lenet_log)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        screen = app.screen
        await wait_for(pilot, lambda: screen.view.baselines and screen.playback.finished)
        screen.playback.speed = 0.001           # the search took half a second: crawl
        await pilot.press("space")            # a finished replay starts over
        assert screen.view.state == "running" and screen.view.steps < 100
        await pilot.press("space")            # pause the playback
        assert screen.view.state == "paused"
        steps = screen.view.steps
        await pilot.press("n")
        assert screen.view.steps == steps + 1
        await pilot.press("right_square_bracket")
        assert screen.playback.speed == 0.25
        await pilot.press("end")
        final = read_search_log(lenet_log).final
        assert screen.view.state == "finished" and screen.view.steps == 600
        assert screen.view.best_cost == final.best_cost
        assert dict(screen.view.best) == dict(final.best)
        assert screen.view.speedup_over("data-parallel") >= 1.0


async def test_a_replay_shows_the_app_at_once_and_reads_its_log_behind_it(lenet_log,
                                                                          monkeypatch):
    """Reading a log (seconds for a long search's) waits for nothing on the UI thread:
    while it is read, the app is up and takes keys."""
    read, reading = threading.Event(), []

    def slow_read(path):
        reading.append(threading.current_thread())
        read.wait(timeout=HANG_S)
        return read_search_log(path)

    monkeypatch.setattr("flextui.tui.app.read_search_log", slow_read)
    app = FlextuiApp(replay=lenet_log)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: reading)
        assert reading[0] is not threading.main_thread()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        read.set()
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        await wait_for(pilot, lambda: app.screen.view is not None and app.screen.view.baselines)


def _not_a_log(path, lenet_log) -> None:
    path.write_bytes(b"not a search log at all")


def _zero_compute_efficiency(path, lenet_log) -> None:
    """A cost model with a compute efficiency of 0 once crashed the app with a Textual
    traceback (and exit status 0); now the log is refused as it is read."""
    path.write_bytes(lenet_log.read_bytes())
    edit_log_header(path, lambda h: h.update(cost_model=AnalyticCostModel().identity.replace(
        "compute_efficiency=0.6", "compute_efficiency=0")))


@pytest.mark.parametrize("make, fragment", [(_not_a_log, "bad.ffsearch"),
                                            (_zero_compute_efficiency, "compute_efficiency")])
async def test_a_bad_log_is_a_dialog_not_a_traceback(lenet_log, tmp_path, make, fragment):
    bad = tmp_path / "bad.ffsearch"
    make(bad, lenet_log)
    data = bad.read_bytes()
    app = FlextuiApp(replay=bad)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
        assert fragment in app.screen.message
        await pilot.press("escape")
        assert isinstance(app.screen, SetupScreen)
    assert bad.read_bytes() == data


async def test_open_a_log_from_the_app(lenet_log):
    app = FlextuiApp()
    async with app.run_test() as pilot:
        await pilot.press("ctrl+o")
        await pilot.press(*"/no/such.ffsearch", "enter")
        assert "no such file" in str(app.screen.query_one("#open-error").render())
        app.screen.query_one("Input").value = str(lenet_log)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))


async def test_help_lists_the_screens_keys(lenet_log):
    app = FlextuiApp(replay=lenet_log)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        actions = {what for _, _, what in app.screen.rows}
        assert {"Play/pause", "Step", "Timeline", "Quit", "Keys"} <= actions
        assert "Pause/resume" not in actions      # a live-search key, not a replay one
        await pilot.press("escape")
        assert isinstance(app.screen, SearchScreen)


# -- snapshots: a replay with a fixed clock, so every figure on screen is fixed ---------

def fixed_clock_playback(path) -> Playback:
    """The saved log with each step's elapsed time set to 1 ms per step."""
    log = read_search_log(path)
    steps = [dataclasses.replace(e, elapsed=e.iteration * 1e-3) for e in log.steps]
    checkpoints = [dataclasses.replace(c, elapsed=c.iteration * 1e-3) for c in log.checkpoints]
    log = dataclasses.replace(log, steps=steps, checkpoints=checkpoints, _history={})
    playback = Playback(log)
    graph, cluster = lenet_node()
    playback.baselines = baseline_costs(graph, cluster, AnalyticCostModel(), SearchOptions())
    playback.to_end()
    return playback


def fixed_replay_screen(path) -> SearchScreen:
    """The Search screen on the saved log played to its end with a fixed clock."""
    graph, cluster = lenet_node()
    playback = fixed_clock_playback(path)
    options = playback.log.header.options
    setup = SearchSetup(graph, cluster, AnalyticCostModel(), options, "lenet on p100-4x4")
    return SearchScreen(playback, setup, "lenet.ffsearch")


@pytest.mark.parametrize("tab, size", [("tab-strategy", (100, 30)), ("tab-map", (100, 30)),
                                       ("tab-frontier", (100, 30)), ("tab-strategy", (80, 24))],
                         ids=["tab-strategy", "tab-map", "tab-frontier", "tab-strategy-80x24"])
def test_search_screen_snapshot(snap_compare, lenet_log, tab, size):
    async def show(pilot):
        pilot.app.push_screen(fixed_replay_screen(lenet_log))
        await pilot.pause()
        pilot.app.screen.query_one("#search-tabs").active = tab
        await pilot.pause(0.1)

    assert snap_compare(FlextuiApp(), terminal_size=size, run_before=show)


@pytest.mark.parametrize("size", [(100, 30), (80, 24)], ids=["100x30", "80x24"])
def test_help_screen_snapshot(snap_compare, lenet_log, size):
    """The key map over a replay: how to use it, the replay's keys and the app's, nothing
    live-only."""
    async def show(pilot):
        pilot.app.push_screen(fixed_replay_screen(lenet_log))
        await pilot.pause()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))

    assert snap_compare(FlextuiApp(), terminal_size=size, run_before=show)


async def test_the_search_runs_off_the_ui_thread_and_keys_work_meanwhile(tmp_path):
    """The chain runs in a worker process, collected on a thread of the search's own;
    meanwhile the UI handles every key pressed and redraws the search's progress.
    (How late the event loop is, ``benchmarks/ui_lag.py`` measures.)"""
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test() as pilot:
        before = set(multiprocessing.active_children())
        start_lenet_search(app, SearchOptions(time_limit=120, seed=5, converge=False))
        live = app.searches[0]
        await wait_for(pilot, lambda: live.view().steps > 0)
        [worker] = set(multiprocessing.active_children()) - before
        assert worker.pid != os.getpid()
        [collector] = [t for t in threading.enumerate() if t.name == live.thread_name]
        assert collector is not threading.main_thread()
        screen = app.screen
        for presses in range(1, 21):
            await pilot.press("g")
            assert screen.by_time == (presses % 2 == 1)
        shown = screen.view.steps
        await wait_for(pilot, lambda: screen.view.steps > shown)
        assert live.view().state == "running"
        await pilot.press("ctrl+q")
    assert live.view().state == "stopped" and not worker.is_alive()
