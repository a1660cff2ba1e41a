"""``flextui launch``'s refusals: everything wrong with what was asked is one message
and exit status 2 before any process starts."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from flextui.cli import main
from flextui.machine.detect import usable_cpus
from flextui.runtime.summary import summarize
from helpers import HANG_S

#: the summary of a run no rank reported a step of
NO_STEPS = summarize([], [], [], 1, None)


def run(capsys, *argv):
    code = main(["launch", *argv])
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), " ".join(err.split())


def test_a_strategy_made_for_another_model_or_batch_is_refused(tmp_path, capsys):
    made = tmp_path / "mlp.json"
    assert main(["show", "-m", "lenet", "-b", "32", "--strategy", "data-parallel",
                 "--cluster", "local-cpu-2", "--export", str(made)]) == 0
    code, _, err = run(capsys, "-m", "lenet", "-b", "16", "--strategy", str(made))
    assert code == 2 and "was made for another graph" in err and "batch 16" in err


def test_a_strategy_for_more_devices_than_the_launch_has_names_both(tmp_path, capsys):
    made = tmp_path / "sixteen.json"
    assert main(["show", "-m", "lenet", "--strategy", "data-parallel", "--cluster",
                 "p100-4x4", "--export", str(made)]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, "-m", "lenet", "--strategy", str(made), "--nproc-per-node", "2")
    assert code == 2 and "made for 16 devices" in err and "this launch has 2" in err
    assert "--cluster local-cpu-2" in err


def test_a_busy_port_is_refused(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run(capsys, "-m", "lenet", "--port", str(port))
    assert code == 2 and f"port {port} is in use" in err


def test_nccl_without_a_gpu_is_refused(capsys):
    code, _, err = run(capsys, "-m", "lenet", "--backend", "nccl")
    assert code == 2 and "--backend nccl needs a GPU per rank" in err


def test_no_torchrun_is_one_message(capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch.distributed.run"
                        else real(name, *a))
    code, _, err = run(capsys, "-m", "lenet")
    assert code == 2 and "torchrun (torch.distributed.run) is missing" in err


@pytest.mark.parametrize("option, value, said", [
    ("--steps", "0", "--steps must be a whole number >= 1, found 0"),
    ("--steps", str(10**23), "--steps 100,000,000,000,000,000,000,000 is larger than "
                             "flextui's limit of 9,223,372,036,854,775,807"),
    ("--warmup", "-1", "--warmup must be a whole number >= 0"),
    ("--seed", str(-10**19), "--seed -10,000,000,000,000,000,000 is larger than"),
    ("--port", "-1", "--port must be a whole number >= 1, found -1"),
    ("--port", "70000", "--port must be a whole number <= 65,535, found 70,000"),
    ("--lr", "nan", "--lr must be a finite number, found nan"),
    ("--lr", "1e400", "--lr must be a finite number, found inf"),
    ("--lr", "1e300", "--lr must be a number <= 3.40282e+38, found 1e+300"),
    ("--nproc-per-node", "0", "--nproc-per-node must be at least 1"),
    ("--nproc-per-node", "65536", "--nproc-per-node must be at most 1,024"),
    ("--nproc-per-node", str(usable_cpus() + 1),
     f"this machine has {usable_cpus()} CPU cores; the launch puts {usable_cpus() + 1} ranks"),
    ("--cluster", "c" * 10_000, "--cluster is 10,000 characters long, over flextui's limit of "
                                "4,096 for a name or path"),
    ("--strategy", "s" * 10_000, "--strategy is 10,000 characters long"),
    ("--cluster", "c" * 300, "--cluster has a part of 300 bytes, longer than a file name"),
    ("--strategy", f"dir/{'s' * 300}.json", "--strategy has a part of 305 bytes"),
    ("--run-log", "r" * 300, "--run-log has a part of 300 bytes"),
    ("--hosts=-Fevil@h1", None, "--hosts: '-Fevil@h1' starts with '-', which ssh would read"),
])
def test_a_bad_option_is_one_line_before_any_work(tmp_path, monkeypatch, capsys, option, value,
                                                  said):
    """Each gave a traceback (a port out of range, a step count msgpack cannot store,
    which left an empty run log behind that blocked its name), ran 90 s before a word
    (65,536 ranks), started more ranks than cores, or was refused by the ranks after
    they started (a NaN learning rate, or one past what a float32 holds)."""
    monkeypatch.chdir(tmp_path)
    code = main(["launch", "-m", "lenet", "--headless", option, *([value] if value else [])])
    err = capsys.readouterr().err
    assert code == 2 and said in " ".join(err.split()), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_check_may_run_more_ranks_than_cores(capsys):
    """A check times nothing, so its ranks may share cores; a timed run may not."""
    ranks = str(usable_cpus() + 1)
    assert run(capsys, "-m", "lenet", "--nproc-per-node", ranks, "--check", "--dry-run")[0] == 0


def test_a_dry_run_prints_the_torchrun_command_and_starts_nothing(capsys):
    code, out, _ = run(capsys, "-m", "lenet", "--nproc-per-node", "2", "--dry-run")
    assert code == 0
    for part in ("-m flextui.runtime.rendezvous", "--nproc-per-node 2", "--rdzv-backend flextui",
                 "--rdzv-endpoint 127.0.0.1:", "--max-restarts 0", "-m flextui.runtime.worker",
                 "FLEXTUI_LAUNCHER_PID=", "OMP_NUM_THREADS=", "GLOO_SOCKET_IFNAME=lo"):
        assert part in out, part


def test_a_failure_quoting_brackets_is_printed_as_said(tmp_path, capsys, monkeypatch):
    """A failed rank's last line is quoted in the message; gloo's errors name their source
    as [path:line], which Rich took for a closing tag (MarkupError, a traceback, no
    message) whenever that line was the last."""
    from flextui.cli import launch as cli_launch
    from flextui.runtime import job
    from flextui.runtime.launch import Outcome, RunStatus

    said = ("rank 0 on localhost failed: RuntimeError: [/__w/pytorch/pytorch/third_party/"
            "gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    monkeypatch.setattr(job, "execute", lambda *a, **k: (
        Outcome(RunStatus.FAILED, 1, 0, said, 1.0), NO_STEPS, []))
    monkeypatch.setattr(cli_launch, "print_summary", lambda *shown: None)
    monkeypatch.setenv("COLUMNS", "1000")
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2",
                 "--run-log", str(tmp_path / "run.ffrun")])
    out, err = capsys.readouterr()
    assert code == 1 and said in out and "Traceback" not in err


def test_a_ranks_output_is_printed_escaped(tmp_path, capsys, monkeypatch):
    """The ranks' lines relayed while the run goes, and the failure message quoting one,
    reached the terminal raw (a rank could set its title, its clipboard, clear it)."""
    from flextui.cli import launch as cli_launch
    from flextui.runtime import job
    from flextui.runtime.launch import Outcome, RunStatus

    escapes = "\x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[2J"

    def execute(prepared, stop, on_record, on_output):
        on_output(1, f"hello {escapes}")
        on_output(-1, f"torchrun {escapes}")
        return Outcome(RunStatus.FAILED, 1, 1, f"rank 1 on localhost failed: {escapes}",
                       1.0), NO_STEPS, []
    monkeypatch.setattr(job, "execute", execute)
    monkeypatch.setattr(cli_launch, "print_summary", lambda *shown: None)
    monkeypatch.setenv("COLUMNS", "1000")
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2", "--headless",
                 "--run-log", str(tmp_path / "run.ffrun")])
    out, err = capsys.readouterr()
    shown = "\\x1b]0;pwned\\x07 \\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J"
    assert code == 1 and "\x1b" not in out + err and "\x07" not in out + err
    assert f"[rank 1] hello {shown}" in err and f"torchrun {shown}" in err
    assert f"rank 1 on localhost failed: {shown}" in out


def test_a_launch_plan_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    """A rank read its plan whatever the file was: a FIFO held it forever."""
    fifo = tmp_path / "plan.msgpack"
    os.mkfifo(fifo)
    rank = subprocess.run([sys.executable, "-m", "flextui.runtime.worker", str(fifo)],
                          capture_output=True, text=True, timeout=HANG_S)  # a hang, not slow
    assert rank.returncode != 0
    assert f"{fifo}: a FIFO (a named pipe), not a regular file" in rank.stderr, rank.stderr


def test_a_strategy_file_nested_too_deep_is_one_message(tmp_path, capsys):
    """Looking in a strategy file for the cluster it was made for parsed it without
    flextui's limits: a file nested 100,000 deep was a RecursionError traceback."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run(capsys, "-m", "lenet", "--strategy", str(deep), "--dry-run")
    assert code == 2 and "nested deeper than flextui's limit of 32 levels" in err, err


def test_a_name_no_file_can_have_is_refused_by_every_command(capsys):
    """``simulate`` and ``show`` asked the file system about a 10,000-character cluster or
    strategy name (``OSError: File name too long``, a traceback)."""
    for argv, said in ((["simulate", "-m", "lenet", "-c", "c" * 300],
                        "cluster has a part of 300 bytes"),
                       (["show", "-m", "lenet", "-s", "s" * 10_000],
                        "strategy is 10,000 characters long")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err


def test_the_app_launches_no_more_cpu_ranks_than_cores_either():
    """The rule preflight keeps on every host holds on this machine, wherever the launch
    comes from (the app launches a ``local-cpu-N`` cluster)."""
    from flextui.cost.analytic import AnalyticCostModel
    from flextui.errors import FlextuiError
    from flextui.machine.detect import cpu_ranks
    from flextui.runtime.job import prepare
    from flextui.runtime.spec import Training
    from flextui.strategy import builtin_strategy
    from helpers import model

    graph, cluster = model("lenet"), cpu_ranks(usable_cpus() + 1)
    with pytest.raises(FlextuiError, match=f"this machine has {usable_cpus()} CPU cores"):
        prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster, Training(),
                AnalyticCostModel())


def test_ctrl_c_while_starting_up_is_a_clean_exit(tmp_path):
    """SIGINT while `flextui launch` imports what it needs (its options name the built-in
    strategies): "interrupted" and exit status 130, not a KeyboardInterrupt traceback."""
    code = textwrap.dedent("""
        import os, runpy, signal, sys

        class CtrlC:   # Ctrl-C, as the strategies start to be imported
            def find_spec(self, name, path=None, target=None):
                if name == "flextui.strategy":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.SIGINT)

        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["flextui", "launch", "-m", "lenet", "--headless", "--dry-run"]
        runpy.run_module("flextui", run_name="__main__")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=HANG_S)
    assert done.returncode == 130 and done.stderr == "flextui: interrupted\n", done.stderr
