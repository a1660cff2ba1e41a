"""torchrun's output, line by line, as the launcher reads it (``RankOutput``): each rank's
lines (tagged ``[rankN]:`` with its global rank) and torchrun's own, the ranks'
metrics records among them, and torchrun's summary of the ranks that failed (each
one's rank and exit status), from which it says which rank failed first and why."""

from __future__ import annotations

import collections
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass

from flextui.runtime.metrics import Failed, RankRecord, RecordError, Start, read_line

TAIL_LINES = 20
_RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$")
_FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


@dataclass
class _FailureBlock:
    """Where the reading of one torchrun's summary of failed ranks is: in its root cause
    section or not, and the rank of the entry being read."""

    root: bool
    rank: int | None = None


class RankOutput:
    """torchrun's output, line by line: metrics records go to ``on_record``, every other
    line to ``on_output`` (rank -1: torchrun's own), and enough is kept to say which rank
    failed first and what it said.

    The first cause is a rank a signal ended (its exit status in torchrun's summary of
    failed ranks): a rank killed outright (the kernel's OOM killer, ``kill -9``) writes
    no record, while the peers whose connections to it broke raise at once and report
    their failures first. Then the ranks' ``failed`` records (the earliest by the ranks'
    clocks), then the root cause torchrun names; with each rank's last lines."""

    def __init__(self, on_record: Callable[[RankRecord], None],
                 on_output: Callable[[int, str], None],
                 host_of: Callable[[int], str] = lambda rank: "localhost") -> None:
        self.on_record, self.on_output = on_record, on_output
        self.host_of = host_of
        self.worker_pids: dict[int, int] = {}
        self.failures: list[Failed] = []
        self._lines: dict[int, collections.deque[str]] = {}
        self.exits: dict[int, int] = {}   # rank -> exit status, from torchrun's summary
        self._root_rank: int | None = None
        self._blocks: dict[str, _FailureBlock] = {}   # per source: each host's torchrun
        self._stopping = False
        self.error: Exception | None = None   # the first a callback raised

    def stopping(self) -> None:
        """The launcher is stopping the run: torchrun's own lines from now on are what
        it says of the signal (a traceback), and are not passed on."""
        self._stopping = True

    def feed(self, line: str, source: str = "") -> None:
        """One line of output; ``source`` (a host) prefixes an untagged line shown. It
        never raises: the first exception of a callback (a display that cannot write) is
        kept in ``error`` and the reading goes on, or torchrun would block on the pipe."""
        try:
            self._feed(line, source)
        except Exception as exc:  # noqa: BLE001 (kept and raised when the run has ended)
            self.error = self.error or exc

    def _feed(self, line: str, source: str) -> None:
        tagged = _RANK_LINE.match(line)
        rank = int(tagged[1]) if tagged else -1
        text = tagged[2] if tagged else line
        try:
            record = read_line(text, f"rank {rank}'s record") if tagged else None
        except RecordError as bad:
            self._show(rank, text)
            self._show(-1, f"flextui: skipped a record of rank {rank}: {bad}")
            return
        if record is None and not tagged and self._stopping:
            return
        if record is None:
            self._remember(rank, text, source)
            self.on_output(rank, f"{source}: {text}" if source and not tagged else text)
            return
        if isinstance(record, Start):
            self.worker_pids[record.rank] = record.pid
        elif isinstance(record, Failed):
            self.failures.append(record)
        self.on_record(record)

    def first_failure(self) -> Failed | None:
        """The ``failed`` record of the rank that failed first, by the ranks' clocks."""
        return min(self.failures, key=lambda r: r.time, default=None)

    def killed(self) -> int | None:
        """The rank a signal ended that torchrun did not send (it stops the other ranks
        with SIGTERM): torchrun's root cause if it is one, else the lowest."""
        killed = [rank for rank, code in self.exits.items()
                  if code < 0 and -code != signal.SIGTERM]
        return self._root_rank if self._root_rank in killed else min(killed, default=None)

    def failure(self, code: int) -> tuple[int | None, str]:
        """The rank that failed first (None: not known) and a line saying so: the
        signal that ended it, or what it raised, else its last line."""
        killed = self.killed()
        first = self.first_failure() if killed is None else None
        rank = killed if killed is not None else first.rank if first else self._root_rank
        said = [line.strip() for line in self._lines.get(rank if rank is not None else -1, [])
                if line.strip()]
        last = first.error if first and first.error else said[-1] if said else "no output"
        if rank is None:
            return None, f"torchrun failed (exit code {code}): {last}"
        # a rank that raised is then stopped by torchrun (SIGTERM): not what ended it
        why = _why(said, None if first is not None else self.exits.get(rank))
        return rank, f"rank {rank} on {self.host_of(rank)} failed{why}: {last}"

    def _show(self, rank: int, text: str) -> None:
        self._remember(rank, text)
        self.on_output(rank, text)

    def _remember(self, rank: int, text: str, source: str = "") -> None:
        """Keep a rank's last lines; read torchrun's summary of failed ranks (``source``
        tells the hosts' torchruns apart): each entry's rank and exit status."""
        self._lines.setdefault(rank, collections.deque(maxlen=TAIL_LINES)).append(text)
        if rank != -1:
            return
        if "Failures:" in text or "Root Cause" in text:
            self._blocks[source] = _FailureBlock(root="Root Cause" in text)
            return
        block = self._blocks.get(source)
        if block is None:
            return
        found, code = _FAILED_RANK.match(text), _EXIT_CODE.match(text)
        if found:
            block.rank = int(found[1])
            if block.root and self._root_rank is None:
                self._root_rank = block.rank
        elif code and block.rank is not None:
            self.exits.setdefault(block.rank, int(code[1]))


def _why(lines: list[str], exit_code: int | None) -> str:
    text = " ".join(lines)
    if "OutOfMemoryError" in text or "MemoryError" in text:
        return " (out of memory)"
    if exit_code is None or exit_code >= 0:
        return ""
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = "a signal"
    hint = "; out of memory?" if exit_code == -signal.SIGKILL else ""
    return f" (killed by {name}, signal {-exit_code}{hint})"
