"""The runtime with real torchrun ranks (gloo on the CPU, one thread each): every small
model under every test strategy equals one process and moves the simulated bytes, and
``flextui launch`` runs, reports, checks and tears down. Every process a test starts is
ended by its PID, and each test asserts none survives."""

import contextlib
import errno
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from flextui.cli import main
from flextui.runtime.check import BF16_TOLERANCE
from flextui.runtime.launch import RunStatus
from flextui.runtime.metrics import End, Failed, Start, Steps
from flextui.runtime.runlog import read_run_log
from helpers import HANG_S
from processes import end, listening, parent_of, torchrun_rows, wait_gone
from runtime_models import SMALL_MODELS, STRATEGIES

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("gloo")]

RUNNER = Path(__file__).with_name("runtime_cases.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_strategy_trains_as_one_process_and_moves_the_simulated_bytes(ranks):
    """Loss at each of 3 steps and every parameter after them equal one process to
    1e-9 relative (float64); in bf16, to the check's 1e-3 of one process in bf16, and
    exactly where every op is one block (model parallelism: the same sums in the same
    order); each rank's bytes in one step equal its device's in the simulated Timeline
    (in bf16, its activations at 2 bytes an element), and the gradient all-reduces it
    starts the simulated buckets it is in."""
    rows = torchrun_rows(RUNNER, ranks)
    assert len(rows) == ranks * len(SMALL_MODELS) * len(STRATEGIES)
    for row in rows:
        tolerance = BF16_TOLERANCE if row["strategy"].startswith("bf16-") else 1e-9
        assert row["loss_error"] < tolerance and row["param_error"] < tolerance, row
        if row["strategy"] == "bf16-model-parallel":
            assert row["loss_error"] == row["param_error"] == 0.0, row
        assert (row["sent"], row["received"], row["sums"]) == \
            (row["simulated_sent"], row["simulated_received"], row["simulated_sums"]), row
    assert any(row["sent"] for row in rows)
    assert any(row["sums"] for row in rows)


def launch(tmp_path, *args, env=None, **popen):
    return subprocess.Popen([sys.executable, "-m", "flextui", "launch", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, **(env or {})}, **popen)


def starts(path: Path) -> dict[int, int]:
    """Rank -> PID of the ranks that have started, from the run log."""
    try:
        log = read_run_log(path)
    except Exception:  # noqa: BLE001 (not written yet)
        return {}
    return {r.rank: r.pid for r in log.records if isinstance(r, Start)}


def wait_for_starts(path: Path, ranks: int, proc) -> dict[int, int]:
    """Rank -> PID once every rank has started (a failure when the launcher ends first,
    or after HANG_S: a hang)."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline and proc.poll() is None:
        found = starts(path)
        if len(found) == ranks:
            return found
        time.sleep(0.1)
    raise AssertionError(f"the ranks did not start (launcher exit {proc.poll()})")


def test_launch_trains_prints_every_device_and_keeps_a_run_log(tmp_path):
    log = tmp_path / "run.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "-b", "16", "--nproc-per-node", "2",
                  "--strategy", "expert", "--steps", "3", "--warmup", "1",
                  "--run-log", str(log))
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:]
    assert "n0.rank0" in out and "n0.rank1" in out and "simulated" in out, out
    assert "finished in" in out
    run = read_run_log(log)
    assert run.header.spec.num_ranks == 2 and run.final.status == RunStatus.FINISHED
    kinds = {(r.rank, type(r)) for r in run.records}
    assert kinds == {(rank, kind) for rank in (0, 1) for kind in (Start, Steps, End)}
    steps = [r for r in run.records if isinstance(r, Steps) and not r.warmup]
    assert sum(r.count for r in steps) == 6   # 3 timed steps, 2 ranks
    assert wait_gone(starts(log).values()) == []


def test_launch_check_compares_with_one_process(tmp_path):
    proc = launch(tmp_path, "-m", "transformer", "-o", "layers=1", "-o", "width=16",
                  "-o", "heads=2", "-o", "seq_len=8", "-o", "vocab=50", "--nproc-per-node",
                  "4", "--strategy", "random", "--check", "--run-log", "check.ffrun")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:] + out
    assert "check passed: 4 ranks equal one process" in out
    assert wait_gone(starts(tmp_path / "check.ffrun").values()) == []


def test_launch_check_passes_on_a_recomputed_strategy_with_adamw(tmp_path):
    """The user's path: a strategy file with ops recomputed among splits, launched with
    AdamW on 2 ranks, equal to one process."""
    path = tmp_path / "s.json"
    assert main(["show", "-m", "lenet", "-c", "local-cpu-2", "-s", "random", "--export",
                 str(path)]) == 0
    data = json.loads(path.read_text())
    for name in ("conv1", "conv2", "fc1"):
        data["ops"][name]["recompute"] = True
    path.write_text(json.dumps(data))
    proc = launch(tmp_path, "-m", "lenet", "--nproc-per-node", "2", "--strategy", str(path),
                  "--optimizer", "adamw", "--check", "--run-log", "check.ffrun")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:] + out
    assert "check passed: 2 ranks equal one process" in out
    assert wait_gone(starts(tmp_path / "check.ffrun").values()) == []


#: a transformer whose training state, with AdamW, outweighs its activations at batch 8
SMALL_GPT = ["-m", "transformer", "-b", "8", "-o", "layers=2", "-o", "width=64", "-o",
             "heads=4", "-o", "seq_len=16", "-o", "vocab=500"]


def test_a_search_under_a_budget_shards_and_its_strategy_passes_launch_check(tmp_path, capsys):
    """The user's path for a model that does not fit: a search with AdamW under a memory
    budget below data parallelism's (3.5 MiB a device) shards parameters, and says so;
    the strategy it exports, launched on 2 ranks, equals one process (--check)."""
    best = tmp_path / "best.json"
    assert main(["search", *SMALL_GPT, "-c", "local-cpu-2", "--optimizer", "adamw",
                 "--budget", "1500", "--memory-budget", "2.4MiB", "--no-log",
                 "--export-strategy", str(best)]) == 0
    said = " ".join(capsys.readouterr().out.split())   # as wrapped to the terminal
    assert "within the 2.4 MiB budget" in said and "parameters sharded (stage" in said
    assert json.loads(best.read_text())["params"]
    proc = launch(tmp_path, *SMALL_GPT, "--nproc-per-node", "2", "--strategy", str(best),
                  "--optimizer", "adamw", "--check", "--run-log", "check.ffrun")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:] + out
    assert "check passed: 2 ranks equal one process" in out
    assert wait_gone(starts(tmp_path / "check.ffrun").values()) == []


def test_a_bf16_search_exports_a_bf16_strategy_and_its_launch_check_passes(tmp_path, capsys):
    """bf16 mixed precision on the user's path: a search with --precision bf16 says so
    and exports a strategy file that trains in bf16; launched with --check on 2 ranks, it
    equals one process computing in bf16 within the check's stated 1e-3."""
    best = tmp_path / "best.json"
    assert main(["search", *SMALL_GPT, "-c", "local-cpu-2", "--precision", "bf16",
                 "--budget", "300", "--no-log", "--export-strategy", str(best)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "; in bf16" in said
    assert json.loads(best.read_text())["precision"] == "bf16"
    proc = launch(tmp_path, *SMALL_GPT, "--nproc-per-node", "2", "--strategy", str(best),
                  "--check", "--run-log", "check.ffrun")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:] + out
    assert "check passed: 2 ranks equal one process" in out and "(tolerance 1e-03)" in out
    assert wait_gone(starts(tmp_path / "check.ffrun").values()) == []


def test_a_pipelined_search_exports_micro_batches_and_its_launch_check_passes(tmp_path,
                                                                              capsys):
    """Pipelines on the user's path: a search started in 4 micro-batches under 1F1B
    says so and exports them; the strategy launched with --check on 2 ranks (at the
    smallest batch its micro-batches and splits divide) equals one process."""
    best = tmp_path / "best.json"
    assert main(["search", *SMALL_GPT, "-c", "local-cpu-2", "--microbatches", "4",
                 "--schedule", "1f1b", "--budget", "200", "--no-pipeline", "--no-log",
                 "--export-strategy", str(best)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "4 micro-batches, 1f1b" in said
    data = json.loads(best.read_text())
    assert (data["microbatches"], data["schedule"]) == (4, "1f1b")
    proc = launch(tmp_path, *SMALL_GPT, "--nproc-per-node", "2", "--strategy", str(best),
                  "--check", "--run-log", "check.ffrun")
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err[-3000:] + out
    assert "check passed: 2 ranks equal one process" in out
    assert wait_gone(starts(tmp_path / "check.ffrun").values()) == []


@dataclass
class Running:
    """A long launch of 2 LeNet ranks whose ranks have started: the launcher, its run
    log, the ranks' PIDs (from the log), torchrun's and its guard's."""

    proc: subprocess.Popen
    log: Path
    ranks: dict[int, int]
    torchrun: int
    guard: int


@contextlib.contextmanager
def running(tmp_path: Path, log: Path):
    """Start a long launch and wait for its ranks; however the test ends, every process
    of it is ended by its PID."""
    proc = launch(tmp_path, "-m", "lenet", "--nproc-per-node", "2", "--steps", "1000000",
                  "--headless", "--run-log", str(log))
    ranks: dict[int, int] = {}
    above: list[int] = []
    try:
        ranks = wait_for_starts(log, 2, proc)
        above.append(parent_of(ranks[0]))
        above.append(parent_of(above[0]))
        yield Running(proc, log, ranks, *above)
    finally:
        end([proc.pid, *ranks.values(), *above])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_stops_every_rank(tmp_path, signum):
    """The signal stops the run as Ctrl-C does: every rank, torchrun and its guard end,
    the run log gets its final record, and nothing prints a traceback (SIGHUP used to
    kill the launcher outright; torchrun printed its own of SIGTERM every time)."""
    with running(tmp_path, tmp_path / "long.ffrun") as run:
        run.proc.send_signal(signum)
        _, err = run.proc.communicate(timeout=HANG_S)
        assert run.proc.returncode == 128 + signum, err[-3000:]
        assert wait_gone([*run.ranks.values(), run.torchrun, run.guard]) == []
        assert read_run_log(run.log).final.status == RunStatus.STOPPED
        assert "Traceback" not in err and "SignalException" not in err, err[-3000:]


def test_a_launch_listens_on_loopback_only(tmp_path):
    """torchrun's rendezvous stores listened on every interface (``*:PORT``, twice),
    without authentication, for the whole run: now its one store listens on 127.0.0.1,
    and so do the ranks' gloo sockets (``GLOO_SOCKET_IFNAME`` is the loopback)."""
    log = tmp_path / "listen.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "--nproc-per-node", "2", "--steps", "1000000",
                  "--run-log", str(log))
    started: list[int] = []
    try:
        pids = wait_for_starts(log, 2, proc)
        torchrun = parent_of(pids[0])
        started = [torchrun, *pids.values()]
        found = listening([proc.pid, *started])
        assert {pid for *_, pid in found} == set(started), found
        assert {address for address, *_ in found} == {"127.0.0.1"}, found
    finally:
        end([proc.pid, *started])
    assert wait_gone(started) == []


def test_a_failing_rank_is_named_and_every_rank_ends(tmp_path):
    log = tmp_path / "fail.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "--nproc-per-node", "2", "--steps", "1000",
                  "--run-log", str(log), env={"FLEXTUI_RANK_FAULT": "1:2"})
    try:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 1, err[-3000:]
        assert "rank 1 on localhost failed" in out and "fails at step 2" in out, out
        final = read_run_log(log).final
        assert final.status == RunStatus.FAILED and final.failed_rank == 1
        # the ranks' and torchrun's tracebacks are in the run log, not on the terminal
        assert "Traceback" not in err and f"flextui runs show --output {log}" in err, err
        shown = subprocess.run([sys.executable, "-m", "flextui", "runs", "show", "--output",
                                str(log)], capture_output=True, text=True, timeout=HANG_S)
        assert "[rank 1] [rank1]: Traceback (most recent call last):" in shown.stdout
        assert wait_gone(starts(log).values()) == []
    finally:
        end([proc.pid, *starts(log).values()])


def test_a_loss_that_becomes_nan_fails_the_run_naming_the_rank_and_step(tmp_path, capsys):
    """A learning rate far too large makes LeNet's loss NaN at its second step: the rank
    reports it (its record raised a JSON error on it) and the launch fails naming the
    rank and the step; the run log keeps the NaN, and ``runs show`` reads it."""
    from flextui.cli import main

    log = tmp_path / "nan.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "-b", "16", "--nproc-per-node", "2",
                  "--strategy", "data-parallel", "--steps", "5", "--warmup", "1",
                  "--lr", "1e10", "--headless", "--run-log", str(log))
    try:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 1, err[-3000:]
        said = " ".join(out.split())
        assert re.search(r"rank [01] on localhost failed: FloatingPointError: the loss became "
                         r"nan at step 2 of 6;", said), said
        run = read_run_log(log)
        assert run.final.status == RunStatus.FAILED and run.final.failed_rank in (0, 1)
        assert any(math.isnan(loss) for r in run.records if isinstance(r, Steps)
                   for loss in r.losses)
        assert main(["runs", "show", str(log)]) == 0
        assert "the loss became nan at step 2" in " ".join(capsys.readouterr().out.split())
        assert wait_gone(starts(log).values()) == []
    finally:
        end([proc.pid, *starts(log).values()])


def test_a_rank_killed_by_a_signal_is_named_not_the_peer_it_broke(tmp_path):
    """kill -9 of rank 1 breaks rank 0's connection, and rank 0 reports that failure
    first (torchrun is held still until it has, as a loaded machine may hold it: it
    would stop rank 0 at once otherwise). The launch names rank 1 and the signal."""
    with running(tmp_path, tmp_path / "killed.ffrun") as run:
        os.kill(run.torchrun, signal.SIGSTOP)
        try:
            os.kill(run.ranks[1], signal.SIGKILL)
            assert wait_gone([run.ranks[0]]) == []  # rank 0 failed (or hangs)
        finally:
            os.kill(run.torchrun, signal.SIGCONT)
        out, err = run.proc.communicate(timeout=HANG_S)
        assert run.proc.returncode == 1, err[-3000:]
        assert "rank 1 on localhost failed (killed by SIGKILL, signal 9" in " ".join(out.split())
        log = read_run_log(run.log)
        assert [r.rank for r in log.records if isinstance(r, Failed)] == [0]  # it did
        assert log.final.failed_rank == 1 and "SIGKILL" in log.final.message


def test_torchrun_ends_with_its_launcher_killed_outright(tmp_path):
    """SIGKILL of the launcher: torchrun ends without its ranks' help (they are held
    still, so their watchdogs cannot end it), through the pipe its guard holds from the
    launcher; the ranks, let go, end too."""
    with running(tmp_path, tmp_path / "orphan.ffrun") as run:
        for pid in run.ranks.values():
            os.kill(pid, signal.SIGSTOP)
        run.proc.kill()
        run.proc.wait(timeout=HANG_S)
        assert wait_gone([run.torchrun, run.guard]) == []  # hang protection
        for pid in run.ranks.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert wait_gone(run.ranks.values()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs to fill (root, or CAP_SYS_ADMIN, can mount one), unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("a full disk needs a small tmpfs, and mounting one is not allowed here "
                    f"({mounted.stderr.strip() or 'mount failed'})")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def fill(path: Path) -> None:
    """Write to ``path`` until its disk is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 65536):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def test_a_full_disk_under_the_run_log_stops_the_run_in_one_line(tmp_path, small_disk):
    """The disk under the run log fills mid-run: one line says so and the launch exits 2,
    every rank ends, and the log reads up to its last whole record (the reader thread
    died on it, with three tracebacks, and the run went on)."""
    with running(tmp_path, small_disk / "full.ffrun") as run:
        fill(small_disk / "filler")
        _, err = run.proc.communicate(timeout=HANG_S)
        assert run.proc.returncode == 2, err[-3000:]
        said = [line for line in err.splitlines() if line.startswith("flextui: error")]
        assert said == [f"flextui: error: cannot write run log {run.log}: No space left on "
                        "device; the run was stopped, and the log holds what came before"]
        assert "Traceback" not in err, err[-3000:]
        assert wait_gone([*run.ranks.values(), run.torchrun, run.guard]) == []
        log = read_run_log(run.log)
        assert log.final is None and {r.rank for r in log.records
                                      if isinstance(r, Start)} == {0, 1}
