"""What ranks report, as single JSON lines on their stdout.

A rank writes a line ``@flextui {...}`` (under 4 KiB, so a pipe never interleaves it
with another rank's) when it starts, at most twice a second while it trains (the steps
since its last report, summed), when a check ends and when it ends. torchrun relays the
lines (with ``[rankN]:`` in front) and the launcher picks them out of the ranks' other
output; no port is opened for them.

Kinds: ``start`` (rank, pid, host, device), ``steps`` (rank, the first and last step
covered, ``warmup``, and sums over them: seconds of a step, of compute and of waiting
on communication, bytes sent and received, the rank's share of each step's loss;
the rank's peak memory so far and GPU utilisation, or None), ``check`` (rank, the
largest relative errors against one process), ``tasks`` (rank, with ``--record-profile``:
the mean time of each of its tasks, ``runtime.tasktimes``) and ``end`` (rank).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

PREFIX = "@flextui "
MAX_LINE = 4000
REPORT_S = 0.5


def encode(record: dict[str, Any]) -> str:
    line = PREFIX + json.dumps(record, separators=(",", ":"), allow_nan=False)
    if len(line.encode()) > MAX_LINE:
        raise ValueError(f"a metrics record of {len(line)} characters is over {MAX_LINE}")
    return line


def decode(line: str) -> dict[str, Any] | None:
    """The record a rank's output line holds (after torchrun's ``[rankN]:``), or None
    for any other line."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(PREFIX):])
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("kind"), str) else None


@dataclass
class StepSums:
    """Sums over the steps one ``steps`` record covers."""

    first: int
    last: int
    warmup: bool
    step_s: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    sent: int = 0
    received: int = 0
    losses: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class Reporter:
    """Collects a rank's steps and writes a ``steps`` record at most every REPORT_S
    seconds (and for the last step of a phase), through ``write`` (a line)."""

    def __init__(self, rank: int, write: Callable[[str], None],
                 memory: Callable[[], int], utilisation: Callable[[], float | None]) -> None:
        self.rank, self.write = rank, write
        self.memory, self.utilisation = memory, utilisation
        self.pending: StepSums | None = None
        self.last_report = 0.0

    def emit(self, kind: str, **fields: Any) -> None:
        self.write(encode({"kind": kind, "rank": self.rank, **fields}))

    def step(self, index: int, warmup: bool, loss_share: float, step_s: float,
             compute_s: float, wait_s: float, sent: int, received: int, last: bool) -> None:
        sums = self.pending
        if sums is None or sums.warmup != warmup:
            self.flush()
            sums = self.pending = StepSums(index, index, warmup)
        sums.last = index
        sums.step_s += step_s
        sums.compute_s += compute_s
        sums.wait_s += wait_s
        sums.sent += sent
        sums.received += received
        sums.losses.append(loss_share)
        now = time.monotonic()
        if last or now - self.last_report >= REPORT_S:
            self.flush()
            self.last_report = now

    def flush(self) -> None:
        if self.pending is None:
            return
        sums, self.pending = self.pending, None
        record = asdict(sums)
        if len(sums.losses) > 64:  # a long report keeps its record short: the mean
            record["losses"] = [sum(sums.losses) / len(sums.losses)]
        self.emit("steps", **record, peak_memory=self.memory(),
                  gpu_util=self.utilisation())
