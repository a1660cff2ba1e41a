"""The app at 80x24: every screen's footer shows the keys to get help and to get out
(nothing cut off at the right edge), the key map says how to close it and how to switch
tabs and names a replay's keys "replay"; a snapshot of the Setup screen at that size
(the Search screen's and the key map's are with the Search screen's tests)."""

import pytest
from textual.widgets import Input, Static

from flextui.machine import load_named_cluster
from flextui.search import SearchOptions
from flextui.session.live_profile import LiveProfile
from flextui.tui.app import FlextuiApp
from flextui.tui.screens import keys
from flextui.tui.screens.help import HelpScreen
from flextui.tui.screens.profile import ProfileScreen
from flextui.tui.screens.search import SearchScreen
from flextui.tui.screens.setup import SetupScreen
from helpers import lenet_node, start_lenet_search, wait_for

SIZE = (80, 24)
HELP_AND_EXIT = {"Keys", "Quit"}   # on every screen, with "Back" on all but Setup


@pytest.fixture(autouse=True)
def cpu_only(monkeypatch):
    """A machine with no GPU (no torch import to detect one)."""
    monkeypatch.setattr("flextui.machine.detect.detect_local",
                        lambda: load_named_cluster("local-cpu"))


def footer_shows(app) -> set[str]:
    """The descriptions of the footer's keys that are seen whole: inside the screen and
    not under the command palette's key, docked at the right where the footer has it
    (none while the footer is being drawn again)."""
    keys = list(app.screen.query("FooterKey"))
    palette = next((k for k in keys if k.has_class("-command-palette")), None)
    if palette is not None and not palette.region.width:
        return set()
    right = palette.region.x if palette is not None else app.size.width
    return {k.description for k in keys if k is not palette
            and k.region.width and k.region.right <= right}


async def settle(pilot) -> None:
    await pilot.pause(0.1)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.1)


async def footer_has(pilot, descriptions: set[str]) -> set[str]:
    """Wait until the footer (redrawn after the screen's next poll) shows every one of
    ``descriptions``; what it shows."""
    await wait_for(pilot, lambda: descriptions <= footer_shows(pilot.app))
    return footer_shows(pilot.app)


async def test_setup_shows_help_and_quit():
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, SetupScreen)
        await footer_has(pilot, HELP_AND_EXIT | {"Search", "Profile"})


async def test_a_live_search_timeline_and_profile_show_help_back_and_quit(tmp_path):
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        start_lenet_search(app, SearchOptions(time_limit=60, seed=1, converge=False))
        live = app.searches[0]
        await wait_for(pilot, lambda: live.view().steps > 0)
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Pause", "Stop", "Timeline",
                                                 "Save best", "Launch best"})
        await pilot.press("x")
        await wait_for(pilot, lambda: live.done)
        await wait_for(pilot, lambda: not {"Pause", "Stop"} & footer_shows(app))
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Timeline", "Save best",
                                                 "Launch best"})
        await pilot.press("t")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "TimelineScreen")
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Compare"})
        graph, cluster = lenet_node()
        app.push_screen(ProfileScreen(LiveProfile(graph, cluster.num_devices), "lenet"))
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Stop"})


async def test_a_replay_shows_help_back_and_quit_and_its_keys_are_replays(lenet_log):
    app = FlextuiApp(replay=lenet_log)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Play/pause", "Timeline",
                                                 "Launch best"})
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert [where for where, _, _ in app.screen.rows if where] == ["replay", "app"]


async def test_a_search_over_several_nodes_offers_no_launch(tmp_path):
    """A launch from the app runs on this machine: over a cluster of several nodes the
    Search screen neither shows nor takes l."""
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        graph, cluster = lenet_node()[0], load_named_cluster("p100-4x4")
        app.on_setup_screen_start_search(SetupScreen.StartSearch(
            graph, cluster, SearchOptions(iterations=20, seed=1, converge=False), "lenet",
            "p100-4x4"))
        live = app.searches[0]
        await wait_for(pilot, lambda: live.done)
        await footer_has(pilot, HELP_AND_EXIT | {"Back", "Timeline", "Save best"})
        assert "Launch best" not in footer_shows(app)
        assert app.screen.check_action("launch", ()) is False


async def test_the_key_map_says_how_to_close_it_and_switch_tabs(tmp_path):
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        start_lenet_search(app, SearchOptions(time_limit=60, seed=2, converge=False))
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        search = app.screen
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))  # on a busy box
        how_to = str(app.screen.query_one("#help-how-to", Static).render())
        assert "esc" in how_to and "closes this" in how_to and "switch tabs" in how_to
        rows = {what: keys for _, keys, what in app.screen.rows}
        assert app.screen.rows[0][0] == "search"
        assert (rows["Strategy tab"], rows["Map tab"], rows["Frontier tab"]) == ("1", "2", "3")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is search)
        tabs = search.query_one("#search-tabs")
        for key, tab in (("2", "tab-map"), ("3", "tab-frontier"), ("1", "tab-strategy")):
            await pilot.press(key)
            assert tabs.active == tab


# -- typed text and single keys ------------------------------------------------------


@pytest.fixture
def asked(monkeypatch) -> list:
    """What the Setup screen asks the app to start (nothing is started)."""
    asked: list = []
    for message in ("search", "profile", "launch"):
        monkeypatch.setattr(FlextuiApp, f"on_setup_screen_start_{message}",
                            lambda app, m: asked.append(m))
    return asked


async def test_a_word_typed_outside_a_field_starts_nothing(monkeypatch, asked, tmp_path):
    """Words typed with no text field focused start no search (s) and no profile (p):
    a key that starts work acts only alone, and no key acts amid typing; the screen
    says the text went nowhere. Alone, p still profiles."""
    notes: list[str] = []
    monkeypatch.setattr(FlextuiApp, "notify", lambda app, message, **_: notes.append(message))
    monkeypatch.setattr(keys, "TYPING_GAP_S", 3600.0)  # the test's keys are one burst
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.focused.id == "start"
        for word in ("search", "expert", "help me please"):
            await pilot.press(*word)
        await pilot.press("enter")
        await settle(pilot)
        assert asked == [] and isinstance(app.screen, SetupScreen)
        assert [note for note in notes if note.startswith("Typed text goes nowhere")]
        monkeypatch.setattr(keys, "TYPING_GAP_S", 0.05)
        await pilot.pause(0.1)                            # longer than the gap
        await pilot.press("p")
        await wait_for(pilot, lambda: asked)
        assert isinstance(asked[0], SetupScreen.StartProfile)


async def test_back_on_setup_its_keys_are_commands_again(monkeypatch, tmp_path):
    """A search started with ctrl+s from a text field, then esc: focus is off the
    fields, so p profiles (as the footer says) instead of typing a "p"."""
    monkeypatch.setattr(keys, "TYPING_GAP_S", 0.05)
    profiles: list = []
    monkeypatch.setattr(FlextuiApp, "on_setup_screen_start_profile",
                        lambda app, m: profiles.append(m))
    app = FlextuiApp(log_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        budget = app.screen.query_one("#budget", Input)
        budget.value = "200"
        budget.focus()
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert not isinstance(app.focused, Input)
        await pilot.press("p")
        await wait_for(pilot, lambda: profiles)
        assert budget.value == "200"


# -- snapshots at 80x24 --------------------------------------------------------------


def test_setup_snapshot(snap_compare):
    assert snap_compare(FlextuiApp(), terminal_size=SIZE, run_before=settle)
