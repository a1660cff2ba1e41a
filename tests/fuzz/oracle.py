"""One fuzz case, run as a user runs flextui (a subprocess), and judged: it ends with
an expected exit status, prints no traceback and no raw terminal escape, prints valid
JSON when asked for JSON, does not hang, leaves no process behind, and leaves the saved
work it was handed readable and unchanged unless it meant to change it.

Every process of a case carries a marker in its environment (``FUZZ_MARK``); what is
left of a case is found by that marker in ``/proc/*/environ`` and ended by PID, so a
torchrun or rank that set up its own session or process group is still found."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: the flextui command and the Python of this virtual environment
PYTHON = sys.executable
FLEXTUI = str(Path(sys.executable).with_name("flextui"))
FUZZ_MARK = "FLEXTUI_FUZZ_CASE"
#: no case may take more virtual memory per process than this: a fuzzed value that
#: asks for a huge allocation must not push the machine (shared, no swap) out of memory
ADDRESS_SPACE = 6 * 2**30
#: seconds a case may run before it counts as a hang (about 20x what the slowest normal
#: case takes on a loaded two-core machine: hang protection, not a measure)
HANG_S = 180.0
#: after a case asked for long work (a huge budget, a model file that loops), it is sent
#: SIGINT after this many seconds and must then stop cleanly within HANG_S
PATIENCE_S = 20.0
#: how long the processes of a case may take to go once it has ended (a rank's
#: watchdog polls its launcher; torchrun ends its workers)
TEARDOWN_S = 60.0
#: exit statuses: a signal's default action (negative) or a command's 128 + N
SIGNALLED = {128 + s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


@dataclass
class Case:
    """What to run and what is allowed: ``argv`` in ``cwd`` with ``stdin`` written (then
    closed after ``stdin_close_s`` seconds); exit statuses in ``codes``; ``json`` when
    stdout must be strict JSON (checked on status 0); ``long`` when what was asked may
    legitimately run past PATIENCE_S (it is then interrupted and must stop cleanly);
    ``signal`` (signal number, a function that waits for the moment and returns when it
    has come) for the signal category; ``check`` a function that judges what is left
    (the saved work), returning a problem or None."""

    category: str
    index: int
    what: str
    argv: list[str]
    cwd: Path
    stdin: bytes | None = None
    stdin_close_s: float = 0.0
    codes: frozenset[int] = frozenset({0, 2})
    json: bool = False
    long: bool = False
    signal: tuple[int, Callable[[subprocess.Popen], None]] | None = None
    check: Callable[[], str | None] | None = None
    escapes_ok: bool = False  # the user's own code prints escapes (a model file)

    @property
    def name(self) -> str:
        return f"{self.category}:{self.index}"


@dataclass
class Verdict:
    case: Case
    problems: list[str] = field(default_factory=list)
    code: int | None = None
    seconds: float = 0.0
    stderr: str = ""
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def marked(token: str) -> list[int]:
    """The PIDs alive now (zombies left out) whose environment holds the case's marker."""
    needle = f"{FUZZ_MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0") and not _zombie(entry):
                found.append(int(entry.name))
    return found


def _zombie(entry: Path) -> bool:
    with contextlib.suppress(OSError, IndexError):
        return (entry / "stat").read_text().rsplit(") ", 1)[1].startswith(("Z", "X"))
    return True


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def run_case(case: Case, hang_s: float = HANG_S, teardown_s: float = TEARDOWN_S) -> Verdict:
    """Run ``case`` and judge it; ``hang_s`` and ``teardown_s`` are hang protection (the
    test suite gives its own, far past any case on a loaded machine)."""
    token = uuid.uuid4().hex
    verdict = Verdict(case)
    out_path, err_path = case.cwd / f".{token}.out", case.cwd / f".{token}.err"
    environment = {**os.environ, FUZZ_MARK: token, "COLUMNS": "100"}
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        # a lone surrogate goes as the bytes Python would decode to it; a NUL cannot be
        # in a command line at all
        argv = [a.replace("\0", "").encode(errors="surrogatepass") for a in case.argv]
        proc = subprocess.Popen(argv, cwd=case.cwd, env=environment,
                                stdin=subprocess.PIPE if case.stdin is not None
                                else subprocess.DEVNULL,
                                stdout=out, stderr=err, preexec_fn=_limit_memory)
        try:
            _feed(proc, case)
            if case.signal is not None:
                signum, moment = case.signal
                moment(proc)
                if proc.poll() is None:
                    proc.send_signal(signum)
            verdict.code = _wait(proc, case, verdict, hang_s)
        finally:
            if proc.poll() is None:
                _kill([proc.pid])
                proc.wait()
    verdict.seconds = time.monotonic() - start
    left = _wait_gone(token, teardown_s)
    if left:
        verdict.problems.append(f"processes left behind: {_describe(left)}")
        _kill(left)
    verdict.stdout = out_path.read_bytes().decode(errors="replace")
    verdict.stderr = err_path.read_bytes().decode(errors="replace")
    out_path.unlink()
    err_path.unlink()
    _judge(case, verdict)
    return verdict


def _feed(proc: subprocess.Popen, case: Case) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, OSError):
        proc.stdin.write(case.stdin or b"")
        proc.stdin.flush()
    if case.stdin_close_s:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(case.stdin_close_s)
    with contextlib.suppress(BrokenPipeError, OSError):
        proc.stdin.close()


def _wait(proc: subprocess.Popen, case: Case, verdict: Verdict, hang_s: float) -> int | None:
    """The case's exit status; a hang (no exit within ``hang_s``, or for long work within
    ``hang_s`` of its SIGINT) is a problem, and the process is killed."""
    try:
        return proc.wait(PATIENCE_S if case.long else hang_s)
    except subprocess.TimeoutExpired:
        pass
    if not case.long:
        verdict.problems.append(f"hang: still running after {hang_s:.0f} s")
        return None
    proc.send_signal(signal.SIGINT)  # what a user does to work that takes too long
    try:
        return proc.wait(hang_s)
    except subprocess.TimeoutExpired:
        verdict.problems.append(f"hang: still running {hang_s:.0f} s after SIGINT")
        return None


def _wait_gone(token: str, teardown_s: float) -> list[int]:
    deadline = time.monotonic() + teardown_s
    while True:
        left = marked(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _describe(pids: list[int]) -> str:
    names = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        names.append(f"{pid} ({cmd[:80]})")
    return ", ".join(names)


def _judge(case: Case, verdict: Verdict) -> None:
    code = verdict.code
    if code is not None and code not in case.codes:
        verdict.problems.append(f"exit status {code}, expected one of {sorted(case.codes)}")
    text = verdict.stdout + verdict.stderr
    if "Traceback (most recent call last)" in text:
        verdict.problems.append("a traceback was printed")
    if not case.escapes_ok and ("\x1b" in text or "\x9b" in text or "\x07" in text):
        verdict.problems.append("a raw terminal escape was printed")
    if code == 2 and not verdict.stderr.strip():
        verdict.problems.append("exit status 2 without a message")
    if case.json and code == 0:
        try:
            json.loads(verdict.stdout, parse_constant=_not_json)
        except ValueError as exc:
            verdict.problems.append(f"--json printed invalid JSON ({exc})"[:200])
    if case.check is not None:
        problem = case.check()
        if problem:
            verdict.problems.append(problem)


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")
