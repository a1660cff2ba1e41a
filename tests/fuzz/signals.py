"""Signals: SIGINT (once or twice), SIGTERM, SIGHUP or SIGKILL sent to ``flextui launch
--headless`` (two CPU ranks here, or one on each of two fake hosts) or to ``flextui
search`` (one or two worker processes), at a random moment: a delay from the start
(start-up imports, preflight, the run) or when the log shows an event (created, the
ranks' first steps, a checkpoint). Then: the exit status is the signal's, nothing is
left running, the log reads, and a log of a run or search stopped by a catchable signal
has its final record."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from flextui.errors import FlextuiError
from fuzz.bases import FAKE_SSH, Bases
from fuzz.oracle import FLEXTUI, HANG_S, PYTHON, Case

CATEGORY = "signals"
SIGNALS = {"INT": signal.SIGINT, "INT twice": signal.SIGINT, "TERM": signal.SIGTERM,
           "HUP": signal.SIGHUP, "KILL": signal.SIGKILL}
#: the exit statuses each may give: the command's own (128 + N), or the signal's default
#: action when it came before flextui set its handlers (a negative status)
CODES = {"INT": {130}, "INT twice": {130}, "TERM": {143, -15}, "HUP": {129, -1},
         "KILL": {-9}}


def _delay(seconds: float) -> Callable[[subprocess.Popen], None]:
    def wait(proc: subprocess.Popen) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(seconds)
    return wait


def _until(seen: Callable[[], bool]) -> Callable[[subprocess.Popen], None]:
    """Wait until ``seen()`` (or the process ended: the signal is then not sent)."""
    def wait(proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + HANG_S
        while proc.poll() is None and time.monotonic() < deadline and not seen():
            time.sleep(0.1)
    return wait


def _run_log_has(path: Path, kind: str | None) -> Callable[[], bool]:
    def seen() -> bool:
        from flextui.runtime.runlog import read_run_log
        if not path.exists():
            return False
        if kind is None:
            return True
        try:
            return any(r.kind == kind for r in read_run_log(path).records)
        except FlextuiError:
            return False
    return seen


def _search_log_has(path: Path, checkpoints: int) -> Callable[[], bool]:
    def seen() -> bool:
        from flextui.search.log import read_search_log
        if not path.exists():
            return False
        try:
            return len(read_search_log(path).checkpoints) >= checkpoints
        except FlextuiError:
            return False
    return seen


def _twice(first: Callable[[subprocess.Popen], None], gap: float
           ) -> Callable[[subprocess.Popen], None]:
    """``first``'s moment, a SIGINT, then ``gap`` seconds (the second comes after)."""
    def wait(proc: subprocess.Popen) -> None:
        first(proc)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _delay(gap)(proc)
    return wait


def _log_check(log: Path, search: bool, final_expected: bool) -> Callable[[], str | None]:
    def check() -> str | None:
        if not log.exists():
            return None
        try:
            if search:
                from flextui.search.log import read_search_log
                final = read_search_log(log).final
            else:
                from flextui.runtime.runlog import read_run_log
                final = read_run_log(log).final
        except FlextuiError as exc:
            return f"the log cannot be read after the signal: {exc}"[:300]
        if final_expected and final is None:
            return "the log of a run stopped by a signal it can catch has no final record"
        return None
    return check


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    name = rng.choice(list(SIGNALS))
    search = rng.random() < 0.4
    if search:
        log = work / "s.ffsearch"
        workers = rng.choice(["1", "2"])
        argv = ["search", "-m", "lenet", "-c", "local-cpu-4", "--budget", "1000000",
                "--no-early-stop", "--workers", workers, "--out", log.name]
        events = [("log created", _search_log_has(log, 0)),
                  ("first checkpoint", _search_log_has(log, 1))]
        what = f"search ({workers} worker(s))"
    else:
        log = work / "run.ffrun"
        argv = ["launch", "--headless", "-m", "lenet", "--nproc-per-node", "2", "--steps",
                "100000", "--run-log", log.name]
        what = "launch"
        if rng.random() < 0.25:
            argv[4:6] = ["--nproc-per-node", "1", "--hosts", "localhost,127.0.0.1", "--ssh",
                         f"{PYTHON} {FAKE_SSH}"]
            what = "launch over two fake hosts"
        events = [("log created", _run_log_has(log, None)),
                  ("ranks started", _run_log_has(log, "start")),
                  ("first steps", _run_log_has(log, "steps"))]
    if rng.random() < 0.5:
        seconds = round(rng.uniform(0.0, 8.0), 2)
        moment, when = _delay(seconds), f"after {seconds} s"
    else:
        when, seen = rng.choice(events)
        moment = _until(seen)
    if name == "INT twice":
        gap = rng.choice([0.0, 0.3, 2.0])
        moment, when = _twice(moment, gap), f"{when}, again {gap} s later"
    return Case(CATEGORY, index, f"{what}: SIG{name} {when}", [FLEXTUI, *argv], work,
                codes=frozenset(CODES[name]), signal=(SIGNALS[name], moment),
                check=_log_check(log, search, final_expected=name in ("INT", "TERM", "HUP")))
