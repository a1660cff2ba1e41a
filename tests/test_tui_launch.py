"""The app's Launch screen: driven by a recorded metric stream with Textual's Pilot (what
it shows, stopping, a failed rank's dialog, 80x24 and a snapshot), and once with a real
2-rank gloo run (every rank ends when the app quits)."""

import sys
import time
from pathlib import Path

import pytest
from textual.widgets import RichLog, Static

from flextui.cost import AnalyticCostModel
from flextui.machine import load_named_cluster
from flextui.machine.detect import cpu_ranks
from flextui.runtime import nodes
from flextui.runtime.hosts import Host
from flextui.runtime.job import prepare
from flextui.runtime.launch import Outcome, RunStatus
from flextui.runtime.metrics import Start, Steps
from flextui.runtime.spec import Training
from flextui.runtime.target import LaunchTarget, Remote
from flextui.session.jobs import JobState
from flextui.session.launching import LaunchRequest, launch_request
from flextui.session.live_launch import ENDED_AS, LiveLaunch
from flextui.strategy import builtin_strategy
from flextui.tui.app import FlextuiApp
from flextui.tui.screens import keys
from flextui.tui.screens.dialogs import ConfirmDialog, ErrorDialog
from flextui.tui.screens.help import HelpScreen
from flextui.tui.screens.launch import LaunchScreen
from flextui.tui.screens.search import SearchScreen
from flextui.tui.widgets.devices import sparkline
from helpers import HANG_S, screen_text, wait_for
from processes import children, end, wait_gone
from runtime_models import small

SIZE = (80, 24)


def lenet_prepared(tmp_path: Path, name="expert", ranks=2):
    """LeNet prepared on ``ranks`` CPU processes, as on a machine with a core for each
    and 24 GiB whatever machine runs the test (the cluster's memory and whether gloo runs
    on the ranks' cores come from the host; the screens under test show its records;
    nothing starts)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("flextui.machine.detect.usable_cpus", lambda: max(ranks, 2))
        patch.setattr("flextui.machine.detect._physical_memory", lambda: 24 * 2**30)
        patch.setattr("flextui.runtime.job.usable_cpus", lambda: max(ranks, 2))
        graph, cluster = small("lenet"), load_named_cluster(f"local-cpu-{ranks}")
        strategy = builtin_strategy(name, graph, cluster)
        return prepare(graph, strategy, cluster, Training(steps=10, warmup=1),
                       AnalyticCostModel(), run_log=tmp_path / "recorded.ffrun")


def steps(rank, first, last, step_s, compute_s, wait_s, warmup=False):
    count = last - first + 1
    return Steps(rank, first, last, warmup, step_s * count, compute_s * count,
                 wait_s * count, 10 * count, 10 * count, (2.3,) * count, 300 * 2**20, None)


RECORDS = [
    Start(0, 1, "node-a", "cpu", 10, 1),
    Start(1, 2, "node-b", "cpu", 10, 1),
    steps(0, 0, 0, 0.5, 0.4, 0.1, warmup=True), steps(1, 0, 0, 0.5, 0.3, 0.2, warmup=True),
    *(steps(rank, s, s, 0.010 + 0.001 * s, 0.006, 0.003) for s in range(1, 11)
      for rank in (0, 1)),
]


class RecordedLaunch(LiveLaunch):
    """A launch that plays recorded records instead of starting torchrun; with ``hold``
    it waits to be stopped before it ends."""

    def __init__(self, prepared, records, outcome, lines=(), hold=False):
        super().__init__(prepared)
        self.records, self.recorded, self.lines, self.hold = records, outcome, lines, hold

    def _work(self):
        with self._lock:
            self._started = time.monotonic()
            self._state = JobState.RUNNING
        for record in self.records:
            self._record(record)
        for rank, line in self.lines:
            self._output(rank, line)
        if self.hold:
            self._stop.wait()
        with self._lock:
            self.outcome = self.recorded
            self._state = ENDED_AS[self.recorded.status]


FINISHED = Outcome(RunStatus.FINISHED, 0, None, "finished in 3.0 s", 3.0)


def open_launch(app, live, baseline=None):
    live.start()
    app.launches.append(live)
    app.push_screen(LaunchScreen(live, "lenet on local-cpu-2", baseline))


async def test_the_screen_shows_every_device_against_the_simulator(tmp_path):
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS, FINISHED,
                          lines=[(1, "hello from rank 1"), (-1, "torchrun says")])
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        open_launch(app, live)
        screen = app.screen
        await wait_for(pilot, lambda: live.done and screen._ended)
        view = live.view()
        assert [d.name for d in view.devices] == ["n0.rank0", "n0.rank1"]
        assert view.steps_done == 11 and view.elapsed_s == 3.0
        assert view.iteration_s == pytest.approx(0.0155)          # mean of 11..20 ms
        assert view.devices[0].busy_s == pytest.approx(0.006)
        assert view.devices[0].simulated_busy_s == live.prepared.simulated.busy_s[0]
        assert len(view.histories[0]) == 10
        shown = screen_text(app)
        assert "n0.rank0" in shown and "n0.rank1" in shown and "[1] hello from rank 1" in shown
        assert "finished" in shown and "15.50 ms measured" in shown
        assert not screen.check_action("stop", ())     # nothing runs any more
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert ("launch", "esc", "Back") in app.screen.rows
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen))


async def test_a_wide_terminal_shows_busy_and_simulated_times_side_by_side(tmp_path):
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS, FINISHED)
    app = FlextuiApp()
    async with app.run_test(size=(120, 40)) as pilot:
        open_launch(app, live)
        simulated = live.prepared.simulated.busy_s[0] * 1e3
        await wait_for(pilot, lambda: f"6.00 {simulated:,.2f}" in " ".join(
            screen_text(app).split()))                   # the redraw after the last record
        shown = screen_text(app)
        assert "busy ms" in shown and "sim ms" in shown and "error" in shown


async def test_every_rank_is_reachable_at_80x24(tmp_path):
    """The devices scroll under their header: at 80x24, 4 ranks all show, and the
    last of 16 is reached by scrolling the list (what focus starts on)."""
    for ranks in (4, 16):
        records = [*(Start(r, r + 1, "h", "cpu", 10, 1) for r in range(ranks)),
                   *(steps(r, 0, 0, 0.010, 0.006, 0.003) for r in range(ranks))]
        live = RecordedLaunch(lenet_prepared(tmp_path, "data-parallel", ranks), records,
                              FINISHED)
        app = FlextuiApp()
        async with app.run_test(size=SIZE) as pilot:
            open_launch(app, live)
            await wait_for(pilot, lambda: live.done and app.screen._ended)
            if ranks == 4:
                await wait_for(pilot, lambda: all(f"n0.rank{r}" in screen_text(app)
                                                  for r in range(4)))
                continue
            await wait_for(pilot, lambda: "n0.rank0" in screen_text(app))
            assert "n0.rank15" not in screen_text(app)
            assert app.focused.id == "devices-list"
            await pilot.press("end")
            await wait_for(pilot, lambda: "n0.rank15" in screen_text(app))
            assert "samples/s" in screen_text(app)          # the header stays


async def test_x_stops_the_run_and_b_waits_for_it(tmp_path):
    stopped = Outcome(RunStatus.STOPPED, -15, None, "stopped; every rank ended", 1.0)
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS[:6], stopped, hold=True)
    made = []

    def baseline(stop=None):
        run = RecordedLaunch(lenet_prepared(tmp_path / "dp", "data-parallel"), RECORDS,
                             FINISHED)
        made.append(run)
        return run

    (tmp_path / "dp").mkdir()
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        open_launch(app, live, baseline)
        await wait_for(pilot, lambda: live.view().state == "running")
        await pilot.pause(0.3)
        await pilot.press("b")
        await wait_for(pilot, lambda: app.screen._baseline_wanted)  # b acts once alone
        assert made == []                                   # not while the run goes
        await pilot.press("x")
        await wait_for(pilot, lambda: live.done)
        await wait_for(pilot, lambda: live.done and made and made[0].done)
        assert live.view().state == "stopped"
        await wait_for(pilot, lambda: "(data parallel, finished)" in screen_text(app))


FAKE_SSH = f"{sys.executable} {Path(__file__).parent / 'fake_hosts' / 'fake_ssh.py'}"
SESSION = "fake_ssh.py"  # in the command line of a session the fake ssh holds


@pytest.fixture
def mute_hosts(monkeypatch):
    """Three hosts whose ssh sessions never answer and never end but when preflight is
    stopped (no timeout of its own ends them here), on a cluster of a node for each.
    torch is imported here, outside the app, as the app's model loading imports it:
    torch's first import inside a running Textual app aborts this process (a C++
    exception in its initialisation, torch 2.13)."""
    import torch  # noqa: F401
    monkeypatch.setattr(nodes, "PREFLIGHT_S", 10 * HANG_S)
    graph, cluster = small("lenet"), cpu_ranks(1, nodes=3)
    target = LaunchTarget(tuple(Host(f"mute-{i}") for i in range(3)), Remote.choose(FAKE_SSH))

    def prepared(stop, log):
        return prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                       Training(steps=3, warmup=1), AnalyticCostModel(), target, run_log=log,
                       stop=stop)
    return prepared


async def wait_for_sessions(pilot, count: int) -> set[int]:
    """The PIDs of the ``count`` ssh sessions preflight has open, once it has."""
    seen: set[int] = set()

    def opened() -> bool:
        seen.update(children(running=SESSION))
        return len(seen) >= count
    await wait_for(pilot, opened)
    return seen


async def test_quitting_while_a_launch_is_prepared_ends_its_preflight(tmp_path, mute_hosts):
    """Quitting the app while a launch was prepared left its preflight's ssh sessions
    to their own timeout (60 s)."""
    app = FlextuiApp()
    seen: set[int] = set()
    try:
        async with app.run_test(size=SIZE) as pilot:
            app.prepare_launch(lambda stop: LaunchRequest(
                mute_hosts(stop, tmp_path / "run.ffrun"), "data-parallel", "mute", None))
            seen = await wait_for_sessions(pilot, 3)
            await pilot.press("ctrl+q")
        assert wait_gone(seen) == []   # only a stop ends them
    finally:
        end(seen)


async def test_leaving_while_the_baseline_is_prepared_ends_its_preflight(tmp_path, mute_hosts):
    """``b`` prepared data parallelism on the UI thread: over hosts the app froze in its
    preflight, which neither esc nor quitting could stop; now it is prepared on a worker
    thread, and leaving the screen (or the app) ends every ssh session at once."""
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS, FINISHED)
    app = FlextuiApp()
    seen: set[int] = set()
    try:
        async with app.run_test(size=SIZE) as pilot:
            open_launch(app, live, lambda stop=None: LiveLaunch(
                mute_hosts(stop, tmp_path / "dp.ffrun"), "data parallel"))
            await wait_for(pilot, lambda: live.done and app.screen._ended)
            await pilot.press("b")
            seen = await wait_for_sessions(pilot, 3)
            assert not app.screen.check_action("baseline", ())   # b acts once
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen))
            assert wait_gone(seen) == []
    finally:
        end(seen)


async def test_a_failed_rank_is_named_in_a_dialog(tmp_path):
    failed = Outcome(RunStatus.FAILED, 1, 1, "rank 1 on localhost failed: RuntimeError: boom",
                     2.0)
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS[:4], failed)
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        open_launch(app, live)
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
        dialog = app.screen
        assert dialog.heading == "Rank 1 on node-b failed" and "boom" in dialog.message


async def test_a_ranks_output_and_failure_are_shown_escaped(tmp_path):
    """A rank's output reached the log pane, and its last line the failure dialog, with
    its terminal escapes raw."""
    escapes = "\x1b]0;pwned\x07 \x1b[2J"
    failed = Outcome(RunStatus.FAILED, 1, 1, f"rank 1 on localhost failed: {escapes}", 2.0)
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS[:4], failed,
                          lines=[(1, f"hello {escapes}")])
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        open_launch(app, live)
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
        shown = "\\x1b]0;pwned\\x07 \\x1b[2J"
        assert str(app.screen.query_one("#error-message", Static).content) == \
            f"rank 1 on localhost failed: {shown}"
        pane = app.screen_stack[-2].query_one(RichLog)
        text = "\n".join(line.text for line in pane.lines)
        assert f"[1] hello {shown}" in text and "\x1b" not in text


async def test_setup_launches_a_built_in_or_a_file_and_names_a_bad_one(tmp_path,
                                                                        monkeypatch):
    """``l`` on Setup launches the strategy its Launch field names on the form's model
    and cluster; a strategy file that is not there is a dialog, nothing started."""
    started: list[LaunchRequest] = []
    monkeypatch.setattr(FlextuiApp, "start_launch", lambda app, request: started.append(request))
    app = FlextuiApp(model="lenet", cluster="local-cpu")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await wait_for(pilot, lambda: started)
        prepared = started[0].prepared
        assert prepared.spec.strategy.name == "data-parallel"
        assert prepared.spec.graph.name == "lenet" and prepared.cluster.name == "local-cpu"
        app.screen.query_one("#launch-strategy").value = str(tmp_path / "nope.json")
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
        assert app.screen.heading == "Cannot launch this strategy"
        assert "nope.json" in app.screen.message and len(started) == 1


async def test_l_on_a_replayed_p100_search_says_what_stands_in_and_asks(lenet_log, tmp_path,
                                                                      monkeypatch):
    """On a machine without GPUs, l on a replayed search of 4 P100s says that 4 CPU
    processes stand in for them (the times measured are not the P100s') and launches
    only once agreed to."""
    monkeypatch.setattr(keys, "TYPING_GAP_S", 0.05)
    monkeypatch.setattr("flextui.runtime.job.usable_cpus", lambda: 4)  # a core per rank
    started: list[LaunchRequest] = []
    monkeypatch.setattr(FlextuiApp, "start_launch", lambda app, request: started.append(request))
    app = FlextuiApp(replay=lenet_log, log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen)
                       and app.screen.view is not None and app.screen.view.best is not None)
        for answer, launched in (("escape", 0), ("enter", 1)):
            await pilot.press("l")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog) or started)
            assert isinstance(app.screen, ConfirmDialog) and started == []
            assert app.screen.message == ("4 CPU processes stand in for the 4 P100s of "
                                          "p100-4x4@1node: the times measured will not be "
                                          "the P100s'.")
            await pilot.press(answer)
            await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
            assert len(started) == launched
        assert started[0].prepared.spec.num_ranks == 4


def test_sparklines_scale_to_their_window():
    assert sparkline(()) == "·" * 12
    assert sparkline((1.0, 2.0, 3.0), width=3) == "▁▄█"
    assert sparkline((5.0, 5.0), width=4) == "  ▄▄"


def test_launch_screen_snapshot(snap_compare, tmp_path):
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS, FINISHED,
                          lines=[(0, "[rank output] step 10 done")])

    async def show(pilot):
        app = pilot.app
        open_launch(app, live)
        await wait_for(pilot, lambda: live.done and app.screen._ended)
        await wait_for(pilot, lambda: "finished" in screen_text(app)   # the redraw after
                       and "step 10 done" in screen_text(app))         # the end

    assert snap_compare(FlextuiApp(), terminal_size=SIZE, run_before=show)


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
async def test_a_real_launch_runs_in_the_app_and_ends_with_it(tmp_path):
    graph, cluster = small("lenet"), load_named_cluster("local-cpu-2")
    request: LaunchRequest = launch_request(
        graph, builtin_strategy("data-parallel", graph, cluster), cluster,
        AnalyticCostModel(), "lenet", tmp_path, training=Training(steps=100000, warmup=1))
    app = FlextuiApp(launch=request)
    pids: list[int] = []
    async with app.run_test(size=SIZE) as pilot:
        live = app.launches[0]
        await wait_for(pilot, lambda: live.view().steps_done >= 3)
        view = live.view()
        assert all(d.samples_per_s > 0 for d in view.devices)
        from flextui.runtime.runlog import read_run_log
        pids = [r.pid for r in read_run_log(request.prepared.run_log).records
                if isinstance(r, Start)]
        assert len(pids) == 2
    # the app has quit: every rank has ended and the run log is finished
    import os
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    from flextui.runtime.runlog import read_run_log
    assert read_run_log(request.prepared.run_log).final.status == RunStatus.STOPPED
