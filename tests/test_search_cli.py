"""`flextui search` and `flextui replay`: results, exports, signals, resume, bad input."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flextui.cli import main
from flextui.cost import AnalyticCostModel
from flextui.errors import SearchLogError
from flextui.search import read_search_log
from flextui.sim import plans, taskstore
from flextui.strategy import builtin_strategy
from helpers import HANG_S, cluster, edit_log_header, model


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_search_exports_a_strategy_simulate_reproduces(capsys, tmp_path):
    log, best = tmp_path / "run.ffsearch", tmp_path / "best.json"
    code, out, _ = run(capsys, "search", "-m", "lenet", "--budget", "300", "--seed", "4",
                       "--out", str(log), "--export-strategy", str(best), "--json")
    data = json.loads(out)
    assert code == 0 and (data["iterations"] == 300 or data["reason"] == "converged")
    assert data["lower_bound_s"] <= data["best_s"] <= min(data["data_parallel_s"], data["initial_s"])
    assert data["log"] == str(log) and data["strategy"] == str(best)
    code, out, _ = run(capsys, "simulate", "-m", "lenet", "--strategy", str(best), "--json")
    assert code == 0 and json.loads(out)["cost_s"] == data["best_s"]

    code, out, _ = run(capsys, "replay", str(log), "--headless", "--json")
    replay = json.loads(out)
    assert code == 0 and replay["best_s"] == data["best_s"] and replay["finished"]
    assert replay["iterations"] == data["iterations"]
    assert replay["best_over_time"][-1]["best_s"] == data["best_s"]
    trace, again = tmp_path / "t.json", tmp_path / "again.json"
    code, out, _ = run(capsys, "replay", str(log), "--export-strategy", str(again), "--trace",
                       str(trace))
    assert code == 0 and "best cost over time" in out
    assert json.loads(again.read_text())["ops"] == json.loads(best.read_text())["ops"]
    assert json.loads(trace.read_text())["traceEvents"]
    code, _, _ = run(capsys, "replay", str(log), "--step", "0", "--export-strategy", str(again))
    assert code == 0 and json.loads(again.read_text())["name"] in ("data-parallel", "expert")


def test_memory_budget_picks_the_fastest_that_fits(capsys, tmp_path):
    code, out, _ = run(capsys, "search", "-m", "lenet", "--budget", "200", "--no-log",
                       "--memory-budget", "1.9MiB", "--export-strategy",
                       str(tmp_path / "b.json"), "--json")
    data = json.loads(out)
    assert code == 0
    budget = data["memory_budget_bytes"]
    assert budget == int(1.9 * 2**20)
    fitting = [p for p in data["frontier"] if p["memory_bytes"] <= budget]
    if fitting:
        assert data["note"] is None
        assert data["strategy_memory_bytes"] <= budget
        assert data["strategy_s"] == min(p["time_s"] for p in fitting)
    else:
        assert "fits the memory budget" in data["note"]
    code, out, _ = run(capsys, "search", "-m", "lenet", "--budget", "200", "--no-log",
                       "--memory-budget", "1.9MiB", "--export-strategy",
                       str(tmp_path / "b.json"))
    used = data["strategy_memory_bytes"] / 2**20
    assert code == 0 and f"needs {used:.1f} MiB on its fullest device, within the 1.9 MiB " \
        "budget" in " ".join(out.split())


@pytest.mark.parametrize("argv, message", [
    (["--budget", "soon"], "give a number of iterations"),
    (["--memory-budget", "12 parsecs"], "not a size in bytes"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--init", "nowhere.json"], "nowhere.json"),
    (["--cluster", "local-cpu", "--no-recompute"], "at least two devices"),
    (["--cost", "profiled", "--profiles", "no-such-dir"], "flextui profile"),
])
def test_bad_search_arguments(capsys, tmp_path, argv, message):
    code, _, err = run(capsys, "search", "-m", "lenet", "--no-log", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_logs(capsys, tmp_path):
    log = tmp_path / "run.ffsearch"
    assert run(capsys, "search", "-m", "lenet", "--budget", "50", "--out", str(log))[0] == 0
    code, _, err = run(capsys, "search", "-m", "lenet", "--budget", "50", "--out", str(log))
    assert code == 2 and "exists" in err and "--resume" in err
    code, _, err = run(capsys, "search", "--resume", str(log))
    assert code == 2 and "already finished" in err
    original = log.read_bytes()
    flipped = bytearray(original)
    flipped[len(original) // 2] ^= 0x10
    bad = tmp_path / "bad.ffsearch"
    bad.write_bytes(bytes(flipped))
    for argv in (["replay", str(bad)], ["search", "--resume", str(bad)]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "corrupt" in err and err.count("\n") == 1
        assert bad.read_bytes() == bytes(flipped)
    foreign = tmp_path / "best.ffsearch"
    foreign.write_text("{}")
    code, _, err = run(capsys, "replay", str(foreign))
    assert code == 2 and "not a flextui search log" in err


ANALYTIC = ("analytic-roofline-v1(compute_efficiency={},memory_efficiency=0.8,"
            "launch_overhead_s=5e-06)")


@pytest.mark.parametrize("edit, message", [
    (lambda h: h.update(cost_model=ANALYTIC.format("0")), "compute_efficiency must be"),
    (lambda h: h.update(cost_model=ANALYTIC.format("1e-400")), "compute_efficiency must be"),
    (lambda h: h.update(cost_model=ANALYTIC.format("e")), "parameters are not"),
    (lambda h: h.update(cost_model=ANALYTIC.format("nan")), "parameters are not"),
    (lambda h: h["options"].update(memory_budget="12GiB"), "options.memory_budget"),
    (lambda h: h["options"].update(chains=0), "options.chains: must be a whole number >= 1"),
    (lambda h: h["options"].update(chains="2"), "options.chains: must be a whole number"),
    (lambda h: h["options"].update(beta="hot"), "options.beta: must be a number"),
])
def test_a_hand_edited_log_header_is_one_message(capsys, tmp_path, edit, message):
    log = tmp_path / "run.ffsearch"
    assert run(capsys, "search", "-m", "lenet", "--budget", "20", "--out", str(log))[0] == 0
    edit_log_header(log, edit)
    edited = log.read_bytes()
    for argv in (["replay", str(log), "--headless"], ["replay", str(log)],
                 ["search", "--resume", str(log)]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and "record 0" in err, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err
        assert log.read_bytes() == edited


def test_resume_checks_the_model(capsys, tmp_path):
    log = tmp_path / "run.ffsearch"
    assert run(capsys, "search", "-m", "lenet", "--budget", "60", "--out", str(log))[0] == 0
    parsed = read_search_log(log)
    torn = tmp_path / "torn.ffsearch"
    torn.write_bytes(log.read_bytes()[:parsed.record_offsets[-1]])
    code, _, err = run(capsys, "search", "--resume", str(torn), "-m", "alexnet")
    assert code == 2 and "not the model this search ran on" in err
    code, _, err = run(capsys, "search", "--resume", str(torn), "--json")
    assert code == 0 and read_search_log(torn).final is not None


#: an iteration budget no search started here reaches: the test ends it, by a signal
FOREVER = "1000000000"


def _start(tmp_path, *argv):
    """``flextui search`` of lenet logging to run.ffsearch (``argv``: a resume instead),
    running until the test ends it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = argv or ("-m", "lenet", "--out", "run.ffsearch")
    return subprocess.Popen([sys.executable, "-m", "flextui", "search", *argv, "--budget",
                             FOREVER, "--no-early-stop"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_until(proc, condition, what: str) -> None:
    """Until ``condition()`` holds while the search ``proc`` runs: however slow the
    machine, the test waits for the event, not for a time; a search that ends first
    fails the test with what it said, and HANG_S guards against a hang."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the search ended before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {HANG_S:.0f} s: the search hangs")
        time.sleep(0.1)


def _logged(path, holds) -> bool:
    """Whether the search log at ``path`` exists and ``holds(log)``."""
    try:
        return holds(read_search_log(path))
    except SearchLogError:   # not there yet, or no header yet
        return False


def _wait_for_steps(proc, path, n=20):
    _wait_until(proc, lambda: _logged(path, lambda log: len(log.steps) >= n), f"{n} steps")


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_cleanly_exports_and_exits_with_the_signals_status(tmp_path, signum,
                                                                          status):
    proc = _start(tmp_path)
    _wait_for_steps(proc, tmp_path / "run.ffsearch")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == status, err
    log = read_search_log(tmp_path / "run.ffsearch")
    assert log.final is not None and log.final.reason == "interrupted"
    assert (tmp_path / "run.best.json").exists() and "best strategy" in out


@pytest.mark.slow
def test_sigkill_leaves_a_log_that_resumes(tmp_path):
    """Killed once it has checkpointed past its start (the log gains a checkpoint record
    after iteration 0), the search resumes from its log and finishes it."""
    path = tmp_path / "run.ffsearch"
    proc = _start(tmp_path)
    _wait_until(proc, lambda: _logged(path, lambda log: len(log.steps) >= 20 and any(
        cp.iteration > 0 for cp in log.checkpoints)), "checkpoint after the first steps")
    proc.kill()
    proc.communicate(timeout=HANG_S)
    killed = read_search_log(path)
    assert killed.final is None and len(killed.steps) >= 20
    last = max(e.iteration for e in killed.steps)
    done = subprocess.run([sys.executable, "-m", "flextui", "search", "--resume", "run.ffsearch",
                           "--budget", str(last + 50), "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    log = read_search_log(path)
    assert log.final is not None and log.final.reason in ("iterations", "converged")
    assert max(e.iteration for e in log.steps) > last


def test_search_says_when_the_c_core_is_not_in_use(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEXTUI_PURE_PYTHON", "1")
    code, _, err = run(capsys, "search", "-m", "lenet", "--budget", "20", "--no-log",
                       "--export-strategy", str(tmp_path / "b.json"))
    assert code == 0 and "C core is not in use" in err
    monkeypatch.delenv("FLEXTUI_PURE_PYTHON")
    if taskstore.CTaskStore is None:
        return  # built without a C compiler: the note is right to stay
    code, _, err = run(capsys, "search", "-m", "lenet", "--budget", "20", "--no-log",
                       "--export-strategy", str(tmp_path / "b.json"))
    assert code == 0 and "C core" not in err


# -- one writer per log ------------------------------------------------------------------


def _wait_for_lock(proc, path):
    """Until the search ``proc`` says it holds the log at ``path``."""
    pid_file = path.with_name(path.name + ".lock")
    _wait_until(proc, lambda: pid_file.exists() and pid_file.read_text().strip()
                == str(proc.pid), f"the lock on {path}")


def _stop(proc):
    """End a search started by the test (by its PID), and check it is gone."""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.poll() is not None and "Traceback" not in err
    return out, err


def _assert_refused(capsys, argv, path, pid):
    code, _, err = run(capsys, *argv)
    assert code == 2 and f"{path} is being written by another search (process {pid})" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_log_being_written_is_refused_to_a_second_search_and_to_the_app(capsys, tmp_path,
                                                                          monkeypatch):
    from flextui.cost import AnalyticCostModel
    from flextui.search import SearchOptions
    from flextui.session.live_search import LiveSearch
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "run.ffsearch"
    proc = _start(tmp_path)
    try:
        _wait_for_steps(proc, log)
        _wait_for_lock(proc, log)
        before = read_search_log(log)
        _assert_refused(capsys, ["search", "-m", "lenet", "--budget", "20", "--out", str(log)],
                        log, proc.pid)
        _assert_refused(capsys, ["search", "--resume", str(log)], log, proc.pid)
        h = before.header       # the app writes its log through the same writer
        live = LiveSearch(h.graph, h.cluster, AnalyticCostModel(), SearchOptions(iterations=20),
                          log_path=log, processes=False)
        live.start()
        assert live.join(HANG_S)
        view = live.view()
        assert view.state == "failed" and f"(process {proc.pid})" in view.message
    finally:
        _stop(proc)
    done = read_search_log(log)
    assert done.final is not None and not done.truncated
    assert done.steps[:len(before.steps)] == before.steps and not log.with_name(
        "run.ffsearch.lock").exists()

    # two resumes of one unfinished log
    other = tmp_path / "other.ffsearch"
    other.write_bytes(log.read_bytes()[:done.record_offsets[-1]])
    unfinished = read_search_log(other)
    proc = _start(tmp_path, "--resume", str(other))
    try:
        _wait_for_lock(proc, other)
        _assert_refused(capsys, ["search", "--resume", str(other)], other, proc.pid)
    finally:
        _stop(proc)
    resumed = read_search_log(other)
    assert resumed.final is not None and not resumed.truncated
    assert resumed.steps[:len(unfinished.steps)] == unfinished.steps


# -- a full disk -------------------------------------------------------------------------


def _search_with_file_limit(tmp_path, *argv):
    """``flextui search`` with files limited to 20 KiB (``ulimit -f 20``): the log's
    writes fail with EFBIG part way (Python ignores SIGXFSZ, so nothing kills it)."""
    import resource

    def limit_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "flextui", "search", "-m", "lenet", "--budget",
                           "5000", "--no-early-stop", "--out", "run.ffsearch", *argv],
                          cwd=tmp_path, env=env, preexec_fn=limit_files, capture_output=True,
                          text=True, timeout=HANG_S)


def _assert_stopped_cleanly(err, log, shown):
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"flextui: error: cannot write search log {shown}: ")
    kept = read_search_log(log)
    assert not kept.truncated and kept.final is None and kept.steps   # whole records only
    return kept


def test_a_file_size_limit_ends_the_search_with_the_best_exported(tmp_path):
    done = _search_with_file_limit(tmp_path)
    assert done.returncode == 2
    _assert_stopped_cleanly(done.stderr, tmp_path / "run.ffsearch", "run.ffsearch")
    assert "File too large" in done.stderr and "the search stopped after" in done.stderr
    assert "is exported to run.best.json" in done.stderr
    assert "flextui search --resume run.ffsearch" in done.stderr
    exported = json.loads((tmp_path / "run.best.json").read_text())
    assert exported["name"] == "searched (seed 0)" and exported["ops"]


def test_a_full_disk_that_refuses_the_export_says_where_the_best_is(tmp_path):
    done = _search_with_file_limit(tmp_path, "--export-strategy", "no/such/dir/best.json")
    assert done.returncode == 2
    _assert_stopped_cleanly(done.stderr, tmp_path / "run.ffsearch", "run.ffsearch")
    assert "could not be exported either" in done.stderr
    assert "flextui replay run.ffsearch --export-strategy best.json" in done.stderr


def test_no_space_left_ends_the_search_the_same_way(capsys, tmp_path, monkeypatch):
    """ENOSPC, part way through a write: the log keeps its whole records."""
    real_write, room = os.write, {"left": 30_000}

    def full_disk(fd, data):
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".ffsearch"):
            return real_write(fd, data)
        if room["left"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data[:room["left"]]))
        room["left"] -= n
        return n
    monkeypatch.setattr(os, "write", full_disk)
    log, best = tmp_path / "run.ffsearch", tmp_path / "best.json"
    code, _, err = run(capsys, "search", "-m", "lenet", "--budget", "5000", "--no-early-stop",
                       "--out", str(log), "--export-strategy", str(best))
    monkeypatch.undo()
    assert code == 2 and "No space left on device" in err
    kept = _assert_stopped_cleanly(err, log, log)
    assert log.stat().st_size == kept.complete_bytes < 30_000
    assert json.loads(best.read_text())["name"] == "searched (seed 0)"


# -- what a search log may not do ---------------------------------------------------------


def test_a_log_never_makes_flextui_run_a_model_file(capsys, tmp_path, monkeypatch):
    """A log's header names a model .py file (hand-made; hashes recomputed): resuming it
    with -b must not import that file, and no hint offers its path as a command."""
    from flextui.cost import AnalyticCostModel
    from flextui.graph import graph_from_dict
    from flextui.graph.library import load_model
    from flextui.machine import load_named_cluster
    from flextui.search import SearchOptions, run_search
    monkeypatch.setenv("COLUMNS", "1000")
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    data = load_model("lenet").to_dict()
    graph = graph_from_dict({**data, "meta": {**data["meta"], "model": str(evil)}})
    log = tmp_path / "run.ffsearch"
    run_search(graph, load_named_cluster("p100-4x4"), AnalyticCostModel(),
               SearchOptions(iterations=30, seed=1), log_path=log)
    log.write_bytes(log.read_bytes()[:read_search_log(log).record_offsets[-1]])  # unfinished

    code, _, err = run(capsys, "search", "--resume", str(log), "-b", "64")
    assert code == 2 and "is not a built-in one" in err and "--model" in err
    assert "to check -b against it" in err and "resume without -b to use" in err
    code, _, err = run(capsys, "search", "--resume", str(log), "--batch-per-device", "4")
    assert code == 2 and "to check --batch-per-device against it" in err
    assert not marker.exists()
    code, out, _ = run(capsys, "search", "--resume", str(log))
    assert code == 0 and not marker.exists()
    hint = out[out.index("flextui simulate"):]
    assert str(evil) not in hint and "-m MODEL.py" in hint


# -- what the output says ------------------------------------------------------------------


def test_exported_strategies_are_named_for_what_they_are(capsys, tmp_path):
    log, best, again, step = (tmp_path / n for n in ("run.ffsearch", "best.json", "again.json",
                                                     "step.json"))
    assert run(capsys, "search", "-m", "lenet", "--budget", "200", "--seed", "4", "--out",
               str(log), "--export-strategy", str(best))[0] == 0
    assert json.loads(best.read_text())["name"] == "searched (seed 4)"
    assert run(capsys, "replay", str(log), "--export-strategy", str(again))[0] == 0
    assert json.loads(again.read_text())["name"] == "searched (seed 4)"
    code, out, _ = run(capsys, "replay", str(log), "--step", "50", "--export-strategy", str(step))
    assert code == 0 and json.loads(step.read_text())["name"] == "searched (seed 4, step 50)"
    code, sim, _ = run(capsys, "simulate", "-m", "lenet", "--strategy", str(step), "--json")
    cost = json.loads(sim)["cost_s"]
    assert code == 0 and json.loads(sim)["strategy"] == "searched (seed 4, step 50)"
    assert f"strategy after step 50 of chain 0: {cost * 1e3:.3f} ms" in " ".join(out.split())
    code, out, _ = run(capsys, "replay", str(log), "--step", "50", "--json")
    assert code == 0 and json.loads(out)["step"] == {"chain": 0, "iteration": 50, "cost_s": cost}


def test_a_search_simulates_each_baseline_once(capsys, tmp_path, monkeypatch):
    """--init auto simulates data parallelism and the expert strategy to pick the start;
    the summary's baselines are those same costs, not simulated again (a full simulation
    at scale takes as long as many proposals)."""
    from flextui.sim.simulator import Simulator
    simulated, simulate = [], Simulator.simulate

    def counted(self, strategy, *args, **kwargs):
        simulated.append(strategy.name)
        return simulate(self, strategy, *args, **kwargs)
    monkeypatch.setattr(Simulator, "simulate", counted)
    code, out, _ = run(capsys, "search", "-m", "lenet", "--budget", "100", "--workers", "2",
                       "--out", str(tmp_path / "run.ffsearch"), "--json")
    assert code == 0
    assert sorted(n for n in simulated if n != "searched (seed 0)") == ["data-parallel",
                                                                      "expert"]
    costs = {name: Simulator.simulate(Simulator(model("lenet"), cluster("p100-4x4@1node"),
                                                AnalyticCostModel()),
                                      builtin_strategy(name, model("lenet"),
                                                       cluster("p100-4x4@1node"))).cost
             for name in ("data-parallel", "expert")}
    data = json.loads(out)
    assert (data["data_parallel_s"], data["expert_s"]) == (costs["data-parallel"],
                                                           costs["expert"])


def test_no_early_reject_simulates_every_proposal_with_the_same_moves(capsys, tmp_path):
    """By default a step sure to be rejected stops simulating (logged as early); with
    --no-early-reject none does, the chain takes the same steps, and its frontier, built
    from every proposal, is at least as good at every memory."""
    logs = {}
    for name, flags in (("early", ()), ("full", ("--no-early-reject",))):
        logs[name] = tmp_path / f"{name}.ffsearch"
        assert run(capsys, "search", "-m", "lenet", "--budget", "300", "--no-early-stop",
                   "--seed", "4", "--out", str(logs[name]), *flags)[0] == 0
    early, full = (read_search_log(logs[name]) for name in ("early", "full"))
    assert any(e.early for e in early.steps) and not any(e.early for e in full.steps)
    assert [(e.changes, e.accepted, e.current) for e in early.steps] == \
        [(e.changes, e.accepted, e.current) for e in full.steps]
    for point in early.final.frontier:
        assert any(p.time <= point.time and p.memory <= point.memory
                   for p in full.final.frontier)


def test_a_resumed_search_counts_the_time_it_ran_before(capsys, tmp_path):
    log, torn = tmp_path / "run.ffsearch", tmp_path / "torn.ffsearch"
    assert run(capsys, "search", "-m", "lenet", "--budget", "600", "--no-early-stop", "--out",
               str(log), "--json")[0] == 0
    torn.write_bytes(log.read_bytes()[:read_search_log(log).record_offsets[-1]])
    unfinished = read_search_log(torn)
    ran = max(e.elapsed for e in unfinished.steps)
    code, out, _ = run(capsys, "search", "--resume", str(torn), "--json")
    data = json.loads(out)
    assert code == 0 and data["iterations"] == 600
    assert data["elapsed_s"] >= ran and read_search_log(torn).final.elapsed == data["elapsed_s"]


def test_a_search_with_no_arguments_says_what_it_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("flextui.cli.search.DEFAULT_BUDGET", "20")
    code, _, err = run(capsys, "search")
    assert code == 0 and ("flextui: searching mlp on p100-4x4@1node, budget 20 (model, cluster, "
                          "budget by default; choose with --model, --cluster, --budget)") in err
    code, _, err = run(capsys, "search", "-m", "lenet", "-c", "p100-4x4", "--budget", "20",
                       "--no-log", "--export-strategy", "b.json")
    assert code == 0 and "searching" not in err
    code, _, err = run(capsys, "search", "--init", "nosuch.json")   # bad input: one line
    assert code == 2 and err.count("\n") == 1 and "searching" not in err


def test_the_progress_line_rewritten_in_place_leaves_no_stale_characters():
    import io

    from rich.console import Console

    from flextui.cli.search import _Progress
    from flextui.search import SearchOptions
    from flextui.search.events import StepEvent
    from flextui.strategy import ParallelConfig
    screen = io.StringIO()
    progress = _Progress(Console(file=screen, force_terminal=True, width=200), SearchOptions(),
                         quiet=False)
    config = ParallelConfig((1,), (0,))
    for iteration, elapsed, best in ((100_000, 1.0, 123.456), (10, 10.0, 0.001)):
        progress.shown = float("-inf")
        progress.update([StepEvent(0, iteration, elapsed, 0, config, best, best, best, True, 0)])
    first, second = screen.getvalue().split("\r")[:2]
    assert "13 steps/ss" not in second and len(second) >= len(first)
    assert second.rstrip().endswith("1 steps/s")


def test_a_log_from_before_replays_to_its_strategy_and_cost(capsys, tmp_path, monkeypatch):
    """tests/logs_from_before/: a search written by flextui 069f2d4 (before the task
    graph was built in C) and the strategy that version exported: today's replay rebuilds
    that strategy, and today's simulator, with each replica group summed alone as that
    version did (no gradient buckets), gives it the cost that version logged; with
    buckets (LeNet's gradients, 0.25 MB, one all-reduce after the backward pass, not
    ten overlapping it on the P100s), more."""
    old = Path(__file__).parent / "logs_from_before"
    best = tmp_path / "best.json"
    code, out, _ = run(capsys, "replay", str(old / "lenet-p100-4x4.ffsearch"), "--headless",
                       "--json", "--export-strategy", str(best))
    assert code == 0
    logged = json.loads(out)
    assert json.loads(best.read_text()) == json.loads(
        (old / "lenet-p100-4x4-best.json").read_text())
    simulate = ("simulate", "-m", "lenet", "-c", "p100-4x4", "--strategy", str(best), "--json")
    code, out, _ = run(capsys, *simulate)
    assert code == 0 and json.loads(out)["cost_s"] > logged["best_s"]
    monkeypatch.setattr(plans, "cluster_bucket_limit", lambda cluster: 0)
    code, out, _ = run(capsys, *simulate)
    assert code == 0 and json.loads(out)["cost_s"] == logged["best_s"] < logged["data_parallel_s"]
