"""How long a profile takes: the estimate said before it starts, the time left while it
runs, and what an interrupted profile says it did and did not measure."""

import os
import signal
import subprocess
import sys

import pytest

from flextui.cli import main
from flextui.cost import estimate
from flextui.cost.estimate import ProfileClock, duration
from helpers import HANG_S


def test_the_time_left_scales_the_tasks_left_by_how_the_done_ones_ran():
    clock = ProfileClock([1.0, 0.0, 3.0, 2.0])
    assert clock.tasks == 4 and clock.total_s == 6.0 and clock.remaining_s == 6.0
    clock.task_done(0, 2.0)            # twice as slow as estimated
    assert clock.remaining_s == pytest.approx(10.0)
    clock.task_done(1, 2.0)            # a cached task: no estimate, no time
    assert clock.remaining_s == pytest.approx(10.0)
    clock.task_done(2, 4.0)            # 4 s for 4 estimated: on estimate now
    assert clock.remaining_s == pytest.approx(2.0)
    clock.task_done(3, 6.0)
    assert clock.remaining_s == 0.0


def test_durations_read_as_people_say_them():
    assert duration(12) == "under a minute"
    assert duration(12 * 60) == "about 12 min"
    assert duration(5400) == "about 1.5 h"
    assert duration(20 * 3600) == "about 20 h"


def run(capsys, *argv):
    """The exit status and the output, lines joined: rich wraps at 80 columns, and where
    a line breaks depends on the machine's CPU name."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), err


def lenet_profile(tmp_path, *more):
    return ("profile", "-m", "lenet", "-b", "4", "--max-devices", "2", "--device", "cpu",
            "--profiles", str(tmp_path), "--repeats", "1", "--warmup", "0", *more)


def test_a_profile_says_what_it_will_measure_and_then_what_it_did(tmp_path, capsys, monkeypatch):
    # a line each: without a terminal Rich wraps at 80 columns, and where depends on the
    # length of the CPU's name ("AMD EPYC" put "measured / now" on two lines)
    monkeypatch.setenv("COLUMNS", "1000")
    code, out, _ = run(capsys, *lenet_profile(tmp_path))
    assert code == 0
    tasks = int(out.split("measuring ")[1].split(" of ")[0])
    assert f"measuring {tasks} of {tasks} tasks on cpu" in out and "estimated" in out
    assert "that is long" not in out
    assert f"done: {tasks} distinct tasks" in out and f"{tasks} measured now" in out
    assert "0 found in the cache" in out and "not measured yet" not in out
    code, out, _ = run(capsys, *lenet_profile(tmp_path))
    assert f"all {tasks} tasks are in the cache" in out and f"{tasks} found in the cache" in out


def test_a_long_profile_says_how_to_shorten_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(estimate, "LONG_PROFILE_S", 0.0)
    code, out, _ = run(capsys, *lenet_profile(tmp_path, "--max-devices", "4"))
    assert code == 0
    assert "that is long: shorten it with --max-devices 1 (" in out and "-b" in out


def test_the_device_is_checked_before_the_model_is_loaded(capsys):
    code, _, err = run(capsys, "profile", "-m", "nosuchnet", "--device", "cuda:1")
    assert code == 2 and "--device cuda:1: no GPU" in err and "nosuchnet" not in err


@pytest.mark.slow
def test_ctrl_c_says_what_was_not_measured_and_exits_130(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "flextui", "profile", "-m", "alexnet", "-b", "4",
         "--max-devices", "16", "--device", "cpu", "--profiles", str(tmp_path),
         "--repeats", "20", "--warmup", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if " tasks " in line and "/" in line:     # the first progress line
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted:" in out and "not measured yet: run the same command again" in out
    assert "the rest from the cache" not in out
    assert list(tmp_path.glob("*.msgpack"))          # what was measured is kept
