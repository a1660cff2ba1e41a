"""The app in a real terminal (a pty), a search with two worker processes running, quit
by a signal: SIGTERM (``kill``, a batch system) and SIGHUP (a closed ssh session or tmux
window: the shell sends it to the whole process group, workers included) do what ctrl+q
does (the log gets its final record, every worker ends, the terminal is restored); after
SIGKILL, which nothing can catch, the workers still end."""

import os
import pty
import select
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from fcntl import ioctl
from pathlib import Path
from termios import TIOCSCTTY, TIOCSWINSZ

import pytest

from flextui.search import read_search_log
from helpers import HANG_S

pytestmark = pytest.mark.slow

#: the app (as ``flextui`` runs it) with a search of two chains started on mount
APP = """
import sys
from flextui.cost import AnalyticCostModel
from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.search import SearchOptions
from flextui.tui import app
from flextui.tui.screens.setup import SetupScreen


class SearchingApp(app.FlextuiApp):
    CSS_PATH = str(app.Path(app.__file__).with_name(app.FlextuiApp.CSS_PATH))

    def on_mount(self):
        graph, cluster = load_model("lenet"), load_named_cluster("p100-4x4", nodes=1)
        options = SearchOptions(time_limit=600, seed=0, chains=2, converge=False)
        self.start_search(SetupScreen.StartSearch(graph, cluster, options, "lenet", "p100"),
                          AnalyticCostModel())


if __name__ == "__main__":   # the workers are spawned: they import this file
    app.FlextuiApp = SearchingApp
    sys.exit(app.run_app(log_dir=sys.argv[1]))
"""
ENTER_ALT_SCREEN, LEAVE_ALT_SCREEN, SHOW_CURSOR = b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?25h"


@dataclass
class AppInTerminal:
    process: subprocess.Popen
    master: int                 # the terminal's side of the pty
    log_dir: Path
    output: bytearray = field(default_factory=bytearray)
    workers: dict[int, bytes] = field(default_factory=dict)   # pid -> its command line

    def read(self, wait: float = 0.05) -> None:
        """Take what the app wrote to its terminal (so the app never blocks on it)."""
        if self.master < 0:
            time.sleep(wait)
            return
        while select.select([self.master], [], [], wait)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:   # the terminal was hung up, or every writer is gone
                return
            if not data:
                return
            self.output.extend(data)
            wait = 0

    def wait_until(self, condition, what: str, timeout: float = HANG_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            self.read()

    def hang_up(self) -> None:
        """Close the terminal, as a closed ssh session or tmux window does."""
        os.close(self.master)
        self.master = -1

    def log(self) -> Path | None:
        return next(self.log_dir.glob("*.ffsearch"), None)

    def searching(self) -> bool:
        """True once both workers run and the log holds steps; records the workers."""
        self.workers = {pid: cmdline(pid) for pid in children(self.process.pid)
                        if b"spawn_main" in cmdline(pid)}
        if len(self.workers) < 2 or self.log() is None:
            return False
        try:
            return bool(read_search_log(self.log()).steps)
        except Exception:  # noqa: BLE001 (the header is not written yet)
            return False

    def a_worker_is_blocked(self) -> bool:
        """A worker's thread waits to write into its pipe to the app (from /proc)."""
        return any("pipe_write" in wchan.read_text()
                   for pid in self.workers for wchan in Path(f"/proc/{pid}/task").glob("*/wchan"))

    def survivors(self) -> list[int]:
        return [pid for pid, command in self.workers.items() if alive(pid, command)]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int, command: bytes) -> bool:
    """``pid`` still runs ``command`` (not reaped, not a zombie, not a reused pid)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and cmdline(pid) == command


def _lead_a_session() -> None:
    """In the child: a session of its own with the pty as its controlling terminal, so
    closing the terminal hangs the session up, as closing an ssh session does."""
    os.setsid()
    ioctl(0, TIOCSCTTY, 0)


@pytest.fixture
def start_app(tmp_path):
    """Starts the app in a new 80x24 terminal and waits for its search to run; every
    process it started is killed by PID at the end if it is still there."""
    started: list[AppInTerminal] = []

    def start(hang_up_on_exit: bool = True) -> AppInTerminal:
        """``hang_up_on_exit``: the app leads the session of its terminal (the kernel
        sends its process group SIGHUP when it exits), as in the tests of quitting;
        else it is in a new session with no controlling terminal, so that its death
        alone tells the workers anything."""
        script = tmp_path / "searching_app.py"
        script.write_text(APP)
        log_dir = tmp_path / f"logs{len(started)}"
        log_dir.mkdir()
        master, terminal = pty.openpty()
        ioctl(terminal, TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        session = {"preexec_fn": _lead_a_session} if hang_up_on_exit \
            else {"start_new_session": True}
        process = subprocess.Popen([sys.executable, str(script), str(log_dir)],
                                   stdin=terminal, stdout=terminal, stderr=terminal,
                                   cwd=tmp_path, **session)
        os.close(terminal)
        app = AppInTerminal(process, master, log_dir)
        started.append(app)
        app.wait_until(app.searching, "the search to run in two workers")
        return app

    yield start
    for app in started:
        for pid in [app.process.pid, *app.survivors()]:
            if alive(pid, cmdline(pid)):
                os.kill(pid, signal.SIGKILL)
        app.process.wait()
        if app.master >= 0:
            os.close(app.master)


def quits_cleanly(app: AppInTerminal, signum: int) -> None:
    """The app exits with the signal's code, its log finished and no worker left."""
    app.wait_until(lambda: app.process.poll() is not None, "the app to exit")
    assert app.process.returncode == 128 + signum
    app.wait_until(lambda: not app.survivors(), "the workers to end")
    log = read_search_log(app.log())
    assert log.final is not None and log.final.reason == "interrupted"
    assert log.final.iterations == sum(len(log.steps_of(c)) for c in (0, 1))


@pytest.mark.parametrize("signum, send", [(signal.SIGTERM, os.kill),
                                          (signal.SIGHUP, os.killpg)],
                         ids=["SIGTERM to the app", "SIGHUP to its process group"])
def test_a_signal_quits_as_ctrl_q_does(start_app, signum, send):
    app = start_app()
    send(app.process.pid, signum)   # the app leads its process group
    quits_cleanly(app, signum)
    app.read()
    screen = app.output[app.output.rindex(ENTER_ALT_SCREEN):]
    assert LEAVE_ALT_SCREEN in screen and SHOW_CURSOR in screen   # the terminal restored


def test_closing_the_terminal_quits_as_ctrl_q_does(start_app):
    """The terminal goes away: the kernel sends SIGHUP, and writing to it fails."""
    app = start_app()
    app.hang_up()
    quits_cleanly(app, signal.SIGHUP)


def test_workers_end_when_the_app_is_killed(start_app):
    """SIGKILL while the app is stopped (ctrl+z, then ``kill -9 %1``): the workers have
    filled the pipe to it, which nothing reads any more once it is dead."""
    app = start_app(hang_up_on_exit=False)
    os.kill(app.process.pid, signal.SIGSTOP)
    app.wait_until(app.a_worker_is_blocked, "a worker to block on the full pipe")
    os.kill(app.process.pid, signal.SIGKILL)
    app.process.wait()
    app.wait_until(lambda: not app.survivors(), "the workers to end")
