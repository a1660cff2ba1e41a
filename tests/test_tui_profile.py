"""The Profile screen and profiled task times in the app, driven with Pilot: profiling
from Setup fills the cache and compares with the analytic model, a second run comes from
the cache, and a search with profiled times uses them (or says why it cannot)."""

import io
import threading
import time

import pytest
import torch
from rich.console import Console

from flextui.cost.profiled import ProfiledCostModel
from flextui.search import read_search_log
from flextui.session.jobs import BackgroundJob, JobState
from flextui.session.live_profile import LiveProfile
from flextui.tui.app import FlextuiApp
from flextui.tui.screens.dialogs import ErrorDialog
from flextui.tui.screens.profile import ProfileScreen
from flextui.tui.screens.search import SearchScreen
from flextui.tui.screens.setup import SetupScreen
from helpers import HANG_S, model, wait_for

CPU_PAIR = """
name = "cpu-pair"
[device_kinds.cpu]
memory = "16GiB"
peak_flops = { float32 = "100 GFLOPS" }
mem_bandwidth = "20 GB/s"
[nodes]
count = 1
gpus_per_node = 2
device = "cpu"
[intra_node]
topology = "switch"
kind = "pcie"
bandwidth = "10 GB/s"
latency = "5us"
"""


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Profiles in a temporary directory, one torch thread (steady timings on a busy
    machine), and this machine is not detected (the form's cluster is used)."""
    monkeypatch.setenv("FLEXTUI_PROFILES", str(tmp_path / "profiles"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def stats_text(app) -> str:
    """The Profile screen's figures, as text."""
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(app.screen.query_one("#profile-stats").content)
    return console.export_text()


async def fill(pilot, values: dict[str, str]) -> None:
    for name, value in values.items():
        pilot.app.screen.query_one(f"#{name}").value = value
    await pilot.pause(0.5)
    await pilot.app.workers.wait_for_complete()


async def profile_once(pilot) -> LiveProfile:
    app = pilot.app
    await pilot.press("p")
    await wait_for(pilot, lambda: isinstance(app.screen, ProfileScreen))
    screen = app.screen
    live = screen.live
    await wait_for(pilot, lambda: live.done)
    # the screen shows how it ended once it has redrawn after the end: its table filled
    await wait_for(pilot, lambda: screen._filled and live.view().state in stats_text(app))
    return live


async def test_profiling_from_setup_fills_the_cache_then_hits_it(tmp_path):
    app = FlextuiApp(model="lenet", cluster="p100-4x4", log_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await fill(pilot, {"batch-size": "4", "nodes": "1"})
        live = await profile_once(pilot)
        view = live.view()
        assert view.state == "finished" and view.done == view.total > 0
        assert view.measured == view.total and view.cached == 0
        table = app.screen.query_one("#profile-table")
        op_types = {table.get_row_at(i)[0] for i in range(table.row_count)}
        assert {"conv2d", "linear", "pool2d"} <= op_types
        assert f"{view.total:,} of {view.total:,}" in stats_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, SetupScreen)
        again = (await profile_once(pilot)).view()
        assert again.measured == 0 and again.cached == view.total


async def test_a_search_with_profiled_times_uses_them(tmp_path):
    cluster = tmp_path / "cpu-pair.toml"
    cluster.write_text(CPU_PAIR)
    app = FlextuiApp(model="lenet", cluster=str(cluster), log_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await fill(pilot, {"batch-size": "4", "budget": "200", "cost": "profiled"})
        await profile_once(pilot)
        await pilot.press("escape")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.searches and app.searches[0].done)
        live = app.searches[0]
        assert isinstance(app.screen, SearchScreen)
        assert isinstance(live.cost_model, ProfiledCostModel) and live.cost_model.times
        header = read_search_log(live.log_path).header
        assert header.cost_model == live.cost_model.identity


async def test_profiled_times_for_a_kind_never_profiled_is_a_dialog(tmp_path):
    app = FlextuiApp(model="lenet", cluster="p100-4x4", log_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await fill(pilot, {"batch-size": "4", "nodes": "1", "cost": "profiled"})
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
        assert "flextui profile" in app.screen.message   # the dialog may not be drawn yet
        assert not app.searches


class Ending(BackgroundJob):
    """A job that ends only when told to: a profile still finishing its task in flight."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def _work(self):
        self.release.wait(HANG_S)
        self._state = JobState.STOPPED

    def _failed(self, message):
        self._state = JobState.FAILED


def test_a_profile_waits_for_an_earlier_one_to_end_before_it_measures(monkeypatch, tmp_path):
    """Off the UI thread: its own thread waits, and shows it is waiting."""
    from flextui.cost import profile
    earlier = Ending()
    earlier.start()
    prepared = threading.Event()
    real = profile.prepare_profile

    def prepare(*args, **kwargs):
        assert earlier.join(0), "measuring began while the earlier profile ran"
        prepared.set()
        return real(*args, **kwargs)
    monkeypatch.setattr(profile, "prepare_profile", prepare)
    live = LiveProfile(model("lenet", batch_size=4), 1, device="cpu", warmup=0, repeats=1,
                       after=[earlier])
    live.start()
    deadline = time.monotonic() + HANG_S   # until the profile leaves its start, however slowly
    while live.view().state == "starting" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live.view().state == "waiting" and not prepared.is_set()
    earlier.release.set()
    assert live.join(HANG_S) and prepared.is_set() and live.view().state == "finished"


def test_a_waiting_profile_stops_when_asked():
    earlier = Ending()
    earlier.start()
    live = LiveProfile(model("lenet", batch_size=4), 1, device="cpu", after=[earlier])
    live.start()
    live.stop()
    assert live.join(HANG_S) and live.view().state == "stopped"
    earlier.release.set()
    assert earlier.join(HANG_S)


async def test_a_profile_started_while_a_left_one_ends_waits_for_it(tmp_path):
    app = FlextuiApp(model="lenet", cluster="p100-4x4", log_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await fill(pilot, {"batch-size": "4", "nodes": "1"})
        ending = Ending()          # the run of a Profile screen left a moment ago
        ending.start()
        app.profiles.append(ending)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ProfileScreen))
        live = app.screen.live
        await wait_for(pilot, lambda: "waiting" in stats_text(app))
        assert live.view().done == 0 and not live.done
        ending.release.set()
        await wait_for(pilot, lambda: live.done)
        assert live.view().state == "finished"
