"""Rank records (``runtime.metrics``): one typed value per kind, decoded and checked
once where the launcher reads a rank's line. A line that starts as a record and is not
one is shown as output with a line saying why it was skipped, and the reader goes on:
a real torchrun's ranks print a bad record and more output than a pipe holds, and the
run still ends."""

import math
import signal
import threading
from pathlib import Path

import pytest

from flextui.runtime.launch import Run, RunStatus, Torchrun, free_port
from flextui.runtime.metrics import (
    Check,
    End,
    Failed,
    RecordError,
    Start,
    Steps,
    TaskRow,
    Tasks,
    encode,
    read_line,
)
from flextui.runtime.rankoutput import RankOutput
from flextui.session.launch_watch import LaunchWatch
from helpers import HANG_S
from processes import end, wait_gone

CHATTY = Path(__file__).with_name("chatty_rank.py")
LINES = 5000  # chatty_rank.LINES

RECORDS = [
    Start(1, 4242, "node-a", "cuda:1", 20, 2),
    Steps(1, 2, 5, False, 0.04, 0.03, 0.01, 4096, 4096, (2.3, 2.2, 2.1, 2.0), 2**20, 87.0),
    Check(1, 1e-12, 3e-13, (2.3, 2.2, 2.1), (2.3, 2.2, 2.1)),
    Tasks(1, "NVIDIA H100", 20, (TaskRow(3, (8, 16), 1e-4, 2e-4, 40),
                                 TaskRow(4, (8,), 5e-5, None, 40))),
    Failed(1, 1.7e9, "RuntimeError: [pair.cc:553] Connection closed by peer"),
    End(1),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: str(r.kind))
def test_every_kind_reads_back_as_it_was_written(record):
    assert read_line("[rank1]:" + encode(record), "rank 1") == record


@pytest.mark.parametrize("body, problem", [
    ('{"kind": "steps", "rank": 0}', "steps: missing first, last, warmup"),
    ('{"kind": "stepz", "rank": 0}', "kind: expected one of start, steps"),
    ('{"kind": "end", "rank": -1}', "rank: expected a whole number >= 0"),
    ('{"kind": "end", "rank": 0, "extra": 1}', "end: unknown 'extra'"),
    ('{"kind": "end", "rank": 0', "not JSON"),
    ('[0, "end"]', "record: expected a map"),
    ('{"kind": "failed", "rank": 0, "time": "now", "error": ""}', "time: expected a number"),
    ('{"kind": "tasks", "rank": 0, "device": "cpu", "steps": 1, "tasks": [["conv1", [2], 0.1, '
     '0.2, 5]]}', r"tasks\[0\] op: expected a whole number"),
    ('{"kind": "tasks", "rank": 0, "device": "cpu", "steps": 1, "tasks": [[1, [2], -0.1, 0.2, '
     '5]]}', r"tasks\[0\] forward: expected a number >= 0"),
    ('{"kind": "tasks", "rank": 0, "device": "cpu", "steps": 1, "tasks": [[1, [2], NaN, 0.2, '
     '5]]}', r"tasks\[0\] forward: expected a finite number"),
    ('{"kind": "tasks", "rank": 0, "device": "cpu", "steps": 1, "tasks": [[1, [2], 0.1, 0.2, '
     '0]]}', r"tasks\[0\] runs: expected a whole number >= 1"),
    ('{"kind": "tasks", "rank": 0, "device": "cpu", "steps": 1, "tasks": [[1, [2], 0.1, 0.2]]}',
     r"tasks\[0\]: expected a list of 5 items"),
])
def test_a_record_that_is_not_one_names_the_field(body, problem):
    with pytest.raises(RecordError, match=f"^rank 0's record: {problem}"):
        read_line("@flextui " + body, "rank 0's record")


def test_a_loss_that_is_not_finite_is_reported_as_such():
    """A diverging run's loss made the rank's record raise (JSON has no NaN): the rank
    died of a JSON error instead of saying its loss was NaN."""
    steps = Steps(0, 3, 5, False, 0.03, 0.02, 0.01, 0, 0, (2.3, math.nan, -math.inf), 0, None)
    line = encode(steps)
    assert '"losses":[2.3,"nan","-inf"]' in line
    back = read_line("[rank0]:" + line, "rank 0")
    assert repr(back.losses) == "(2.3, nan, -inf)" and back.first == 3
    check = read_line(encode(Check(0, math.nan, math.inf, (math.inf,), (1.0,))), "rank 0")
    assert (repr(check.losses), check.param_error, check.worst) == ("(inf,)", math.inf,
                                                                     math.inf)
    for bad, problem in ((line.replace('"step_s":0.03', '"step_s":"nan"'), "step_s: expected a number"),
                         (line.replace('"nan"', '"NaN"'), "losses: expected a number")):
        with pytest.raises(RecordError, match=problem):
            read_line(bad, "rank 0")


def test_a_bad_record_is_shown_as_output_and_the_next_one_is_read():
    records, lines = [], []
    output = RankOutput(records.append, lambda rank, line: lines.append((rank, line)))
    output.feed('[rank0]:@flextui {"kind": "steps", "rank": 0}')
    output.feed("[rank0]:" + encode(End(0)))
    assert records == [End(0)]
    assert lines[0] == (0, '@flextui {"kind": "steps", "rank": 0}')
    rank, said = lines[1]
    assert rank == -1 and said.startswith("flextui: skipped a record of rank 0: ")
    assert "missing first, last" in said


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_rank_printing_a_bad_record_then_much_output_still_finishes(tmp_path):
    """One bad record used to kill the thread reading torchrun's output (the display
    took it for a steps record and raised); torchrun then blocked on the full pipe and
    the launch never ended."""
    watch = LaunchWatch(["r0", "r1"], [0, 0], 8, LINES, 0, None)  # the app's display
    records, lines = [], []

    def on_record(record):
        records.append(record)
        watch.record(record)

    torchrun = Torchrun(tmp_path / "plan", 2, free_port(), "chatty", tmp_path / "ranks",
                        entry=(str(CHATTY),))
    run = Run(torchrun, on_record, lambda rank, line: lines.append((rank, line)))
    stop, ended = threading.Event(), []
    follow = threading.Thread(target=lambda: ended.append(run.wait(stop)), daemon=True)
    run.start()
    try:
        follow.start()
        follow.join(timeout=HANG_S)   # hang protection, not what is tested
        stop.set()
        follow.join(timeout=HANG_S)
        assert ended and ended[0].status == RunStatus.FINISHED, ended
        assert sorted((r.rank, type(r)) for r in records if not isinstance(r, Start)) == \
            [(0, End), (1, End)]
        assert sum(line.startswith("line ") for _, line in lines) == 2 * LINES
        assert sum(line.startswith("flextui: skipped a record of rank ") and
                   "missing first" in line for _, line in lines) == 2
        assert wait_gone([run.pid, *run.worker_pids.values()]) == []
    finally:
        end([pid for pid in (run.pid, *run.worker_pids.values()) if pid])


def summary(other, root):
    """torchrun's summary of failed ranks (as it prints it when the run fails): the
    entries ``other`` and ``root`` are (rank, exit status)."""
    def entry(n, rank, code):
        said = (f"Signal {-code} ({signal.Signals(-code).name}) received by PID {100 + rank}"
                if code < 0 else "Traceback (most recent call last):\n    RuntimeError: "
                                 "[pair.cc:553] Connection closed by peer")
        return [f"[{n}]:", "  time      : 2026-11-26_00:24:13", "  host      : localhost",
                f"  rank      : {rank} (local_rank: {rank})",
                f"  exitcode  : {code} (pid: {100 + rank})", "  error_file: <N/A>",
                f"  traceback : {said}"]
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "=" * 40,
            "flextui.runtime.worker FAILED", "-" * 40, "Failures:", *entry(1, *other),
            "-" * 40, "Root Cause (first observed failure):", *entry(0, *root), "=" * 40]


@pytest.mark.parametrize("other, root", [((0, 1), (1, -9)), ((1, -9), (0, 1))])
def test_a_rank_a_signal_ended_is_named_before_a_peer_that_failed_first(other, root):
    """Rank 1 killed outright writes nothing; rank 0 raises on the broken connection and
    reports it first, by its clock. The exit status torchrun lists names rank 1, wherever
    torchrun put it in its summary (its root cause is by whole seconds)."""
    output = RankOutput(lambda record: None, lambda rank, line: None)
    output.feed("[rank0]:" + encode(Failed(0, 1.7e9, "RuntimeError: [pair.cc:553] "
                                              "Connection closed by peer")))
    for line in "\n".join(summary(other, root)).splitlines():
        output.feed(line)
    assert output.exits == {0: 1, 1: -9}
    assert output.failure(1) == (1, "rank 1 on localhost failed (killed by SIGKILL, signal 9; "
                                    "out of memory?): no output")


def test_a_rank_that_raised_is_not_said_to_be_killed_by_torchruns_sigterm():
    """Rank 0 raised, and torchrun's SIGTERM reached it while it was ending: its exit
    status is SIGTERM's, but what ended it is what it raised (the message said "killed
    by SIGTERM" whenever the signal came first)."""
    output = RankOutput(lambda record: None, lambda rank, line: None)
    output.feed("[rank0]:" + encode(Failed(0, 1.7e9, "FloatingPointError: the loss became "
                                              "nan at step 2 of 6")))
    for line in summary((1, -signal.SIGTERM), (0, -signal.SIGTERM)):
        output.feed(line)
    assert output.failure(1) == (0, "rank 0 on localhost failed: FloatingPointError: the loss "
                                    "became nan at step 2 of 6")
